"""A post's or a comment's earlier texts (its author and the course's teachers read them)."""

# No `from __future__ import annotations`: see resource.py.

from typing import Annotated

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from fastapi import APIRouter, Depends

from services.gateway import schemas
from services.gateway.convert import JsonBytes, optional_value, page, revision_json
from services.gateway.params import CursorId, Limit
from services.gateway.routes.forum.resource import AskedOf, Edit, Resource, Row


def add_routes(router: APIRouter, resource: Resource[Row, Edit]) -> None:
    """The resource's earlier texts, newest first."""
    At = Annotated[AskedOf, Depends(resource.asked)]  # noqa: N806 (a type, named as one)

    summary = resource.summaries.revisions

    @resource.route(router, "GET", "/revisions", "{noun}_revisions", summary, schemas.RevisionsPage)
    async def revisions(at: At, limit: Limit = 20, before_id: CursorId = None) -> JsonBytes:
        target = resource.target(at.target_id)
        rpc = read_pb.ListRevisionsRequest(
            course_id=at.course_id,
            user_id=at.user.user_id,
            target=target,
            limit=limit,
            before_id=before_id,
        )
        reply = await at.clients.forum_read.ListRevisions(rpc, **at.clients.options)
        data = [revision_json(r) for r in reply.revisions]
        cursor = optional_value(reply, "next_before_id")
        return page(data, limit, reply.has_more, next_before_id=cursor)
