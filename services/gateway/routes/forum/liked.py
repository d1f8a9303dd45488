"""Whether the user likes each post or comment an answer carries: one LikedMap call a page."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from agora.forum.v1 import forum_pb2
from agora.forum.v1 import like_service_pb2 as like_pb

from services.gateway.auth import Principal
from services.gateway.clients import Clients
from services.gateway.routes.forum.asked import Asked

log = logging.getLogger(__name__)

Row = TypeVar("Row", forum_pb2.Post, forum_pb2.Comment)
# A like_pb.Target as the fields the request's constructor copies in (cheaper than a message each).
Target = dict[str, int]


async def liked_by_me_or_unknown(
    clients: Clients, user: Principal, course_id: int, targets: list[Target]
) -> list[bool | None]:
    """liked_by_me for each target: one LikedMap call (one SMISMEMBER); None if unavailable."""
    if not targets:
        return []
    try:
        reply = await clients.likes.LikedMap(
            like_pb.LikedMapRequest(user_id=user.user_id, course_id=course_id, targets=targets),
            **clients.options,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise
        # The page is still worth showing; the UI learns the like state is unknown.
        log.warning("likes unavailable, liked_by_me unknown: %s", exc.details())
        return [None] * len(targets)
    return list(reply.liked)


async def with_likes(
    asked: Asked,
    kind: like_pb.TargetKind,
    to_json: Callable[[Row, bool | None], dict[str, Any]],
    rows: Sequence[Row],
) -> list[dict[str, Any]]:
    """Each post or comment (of `kind`) as JSON with whether the caller likes it."""
    targets = [{"kind": kind, "id": row.id} for row in rows]
    liked = await liked_by_me_or_unknown(asked.clients, asked.user, asked.course_id, targets)
    return [to_json(row, flag) for row, flag in zip(rows, liked, strict=True)]
