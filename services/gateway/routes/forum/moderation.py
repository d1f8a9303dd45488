"""A course's moderation log: its teachers' removals and edits of other members' posts and
comments, newest first (the course's teachers read it)."""

from __future__ import annotations

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from fastapi import APIRouter

from services.gateway import schemas
from services.gateway.convert import JsonBytes, moderation_json, optional_value, page
from services.gateway.params import CursorId, Limit
from services.gateway.routes.forum.asked import InCourse


async def list_moderation(at: InCourse, limit: Limit = 20, before_id: CursorId = None) -> JsonBytes:
    rpc = read_pb.ListModerationActionsRequest(
        course_id=at.course_id, user_id=at.user.user_id, limit=limit, before_id=before_id
    )
    reply = await at.clients.forum_read.ListModerationActions(rpc, **at.clients.options)
    data = [moderation_json(a) for a in reply.actions]
    cursor = optional_value(reply, "next_before_id")
    return page(data, limit, reply.has_more, next_before_id=cursor)


def add_routes(router: APIRouter) -> None:
    router.add_api_route(
        "/moderation",
        list_moderation,
        methods=["GET"],
        summary="The course's moderation log, newest first (the course's teachers only)",
        response_model=schemas.ModerationPage,
    )
