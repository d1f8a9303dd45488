"""The courses the caller belongs to: the one forum route outside a course."""

from __future__ import annotations

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from fastapi import APIRouter

from services.gateway import schemas
from services.gateway.auth import CurrentUser
from services.gateway.clients import RequestClients
from services.gateway.convert import JsonBytes, membership_json, optional_value, page
from services.gateway.params import CursorId, Limit

router = APIRouter(prefix="/api/courses", tags=["forum"])


@router.get(
    "",
    summary="The courses you belong to, by course id, with your role in each",
    response_model=schemas.CoursesPage,
)
async def list_courses(
    clients: RequestClients,
    user: CurrentUser,
    limit: Limit = 20,
    after_id: CursorId = None,
) -> JsonBytes:
    rpc = read_pb.ListCoursesRequest(user_id=user.user_id, limit=limit, after_id=after_id)
    reply = await clients.forum_read.ListCourses(rpc, **clients.options)
    return page(
        [membership_json(m) for m in reply.courses],
        limit,
        reply.has_more,
        next_after_id=optional_value(reply, "next_after_id"),
    )
