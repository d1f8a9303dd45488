"""Forum pieces ingest, timeline and likes share: row layouts, row → proto, the enrolment check."""

from __future__ import annotations

from typing import Any

import asyncpg
import grpc
from agora.forum.v1 import forum_pb2

from services.runtime.grpc_errors import abort
from services.runtime.timeutil import to_timestamp

POST_COLUMNS = "id, course_id, user_id, title, body, like_count, comment_count, created_at"
COMMENT_COLUMNS = (
    "id, post_id, parent_id, user_id, body, like_count, reply_count, reply_to_comment_id,"
    " reply_to_user_id, created_at"
)


IS_MEMBER = "SELECT 1 FROM course_members WHERE course_id = $1 AND user_id = $2"
NOT_ENROLLED = "you are not enrolled in this course"


async def is_member(pool: asyncpg.Pool, course_id: int, user_id: int) -> bool:
    """Whether the user is enrolled in the course (a primary-key lookup)."""
    return await pool.fetchval(IS_MEMBER, course_id, user_id) is not None


def post_from_row(row: Any) -> forum_pb2.Post:
    return forum_pb2.Post(
        id=row["id"],
        course_id=row["course_id"],
        user_id=row["user_id"],
        title=row["title"],
        body=row["body"],
        like_count=row["like_count"],
        comment_count=row["comment_count"],
        created_at=to_timestamp(row["created_at"]),
    )


def comment_from_row(row: Any) -> forum_pb2.Comment:
    comment = forum_pb2.Comment(
        id=row["id"],
        post_id=row["post_id"],
        user_id=row["user_id"],
        body=row["body"],
        like_count=row["like_count"],
        reply_count=row["reply_count"],
        created_at=to_timestamp(row["created_at"]),
    )
    for name in ("parent_id", "reply_to_comment_id", "reply_to_user_id"):
        if row[name] is not None:
            setattr(comment, name, row[name])
    return comment


async def require_enrolled(enrolled: bool, context: grpc.aio.ServicerContext) -> None:
    """PERMISSION_DENIED unless the acting user is enrolled (checked before anything else)."""
    if not enrolled:
        await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
