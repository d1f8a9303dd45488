"""Who liked a post or a comment, and a user's like of one (60 toggles a minute per user)."""

# No `from __future__ import annotations`: see resource.py.

from typing import Annotated

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from fastapi import APIRouter, Depends

from services.gateway import schemas
from services.gateway.convert import JsonBytes, liker_json, ok, optional_time, optional_value, page
from services.gateway.params import CursorId, LikersLimit, TimeCursor, request_time
from services.gateway.rate_limit import LikeLimiter
from services.gateway.routes.forum.resource import AskedOf, Edit, Resource, Row


def add_likers_route(router: APIRouter, resource: Resource[Row, Edit]) -> None:
    """Who liked it, newest first."""
    At = Annotated[AskedOf, Depends(resource.asked)]  # noqa: N806 (a type, named as one)

    summary = resource.summaries.likers

    @resource.route(router, "GET", "/likes", "{noun}_likers", summary, schemas.LikersPage)
    async def likers(
        at: At,
        limit: LikersLimit = 50,
        before_liked_at: TimeCursor = None,
        before_user_id: CursorId = None,
    ) -> JsonBytes:
        rpc = read_pb.ListLikersRequest(
            course_id=at.course_id,
            user_id=at.user.user_id,
            target=resource.target(at.target_id),
            limit=limit,
            before_liked_at=request_time(before_liked_at, "before_liked_at"),
            before_user_id=before_user_id,
        )
        reply = await at.clients.forum_read.ListLikers(rpc, **at.clients.options)
        return page(
            [liker_json(r) for r in reply.likers],
            limit,
            reply.has_more,
            next_before_liked_at=optional_time(reply, "next_before_liked_at"),
            next_before_user_id=optional_value(reply, "next_before_user_id"),
        )


def add_like_route(router: APIRouter, resource: Resource[Row, Edit]) -> None:
    """The user's like of it, set or taken back."""
    At = Annotated[AskedOf, Depends(resource.asked)]  # noqa: N806 (a type, named as one)

    summary = resource.summaries.like

    @resource.route(router, "POST", "/like", "like_{noun}", summary, schemas.LikeResponse)
    async def like(at: At, limiter: LikeLimiter, body: schemas.LikeBody) -> JsonBytes:
        user_id = at.user.user_id
        await limiter.enforce(user_id, "like toggles")
        target = {"kind": resource.kind, "id": at.target_id}
        rpc = like_pb.SetLikeRequest(
            user_id=user_id, course_id=at.course_id, target=target, like=body.like
        )
        reply = await at.clients.likes.SetLike(rpc, **at.clients.options)
        return ok({"liked": reply.liked, "changed": reply.changed})
