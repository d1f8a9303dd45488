"""Forum rules ingest, timeline and likes share: row layouts and row → proto, who may act in a
course (enrolment), and which posts and comments are live targets of a course."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
from agora.forum.v1 import forum_pb2

from services.runtime.grpc_errors import abort

POST_COLUMNS = (
    "id, course_id, user_id, title, body, like_count, comment_count, created_at, edited_at, version"
)
COMMENT_COLUMNS = (
    "id, post_id, parent_id, user_id, body, like_count, reply_count, reply_to_comment_id,"
    " reply_to_user_id, created_at, edited_at, version"
)
# Each column is the Post / Comment field of the same name.
_POST_FIELDS = tuple(POST_COLUMNS.split(", "))
_COMMENT_FIELDS = tuple(COMMENT_COLUMNS.split(", "))


def qualified(columns: str, alias: str) -> str:
    """POST_COLUMNS or COMMENT_COLUMNS of the table called `alias` (in a join, or an UPDATE …
    FROM whose other side has columns of the same names)."""
    return ", ".join(f"{alias}.{name}" for name in columns.split(", "))


# Enrolment as an SQL predicate over parameters {course} and {user}: the one spelling of the rule,
# in every statement that checks it.
ENROLLED_IN_COURSE = (
    "EXISTS (SELECT 1 FROM course_members WHERE course_id = {course} AND user_id = {user})"
)
IS_MEMBER = "SELECT 1 FROM course_members WHERE course_id = $1 AND user_id = $2"
NOT_ENROLLED = "you are not enrolled in this course"
# A teacher of the course: who may moderate its posts and comments and read its moderation log.
TEACHES_COURSE = """EXISTS (
  SELECT 1 FROM course_members
  WHERE course_id = {course} AND user_id = {user} AND role = 'teacher')"""
MEMBER_ROLE = "SELECT role FROM course_members WHERE course_id = $1 AND user_id = $2"
TEACHER = "teacher"
NOT_A_TEACHER = "only a teacher of this course can do this"

# A live target of a course, as SQL predicates over parameters {course} and {target}: the post is
# not deleted; the comment, its root and its post are not deleted (a deleted root takes its
# replies with it) and the post is in the course.
LIVE_POST_IN_COURSE = """EXISTS (
  SELECT 1 FROM posts WHERE id = {target} AND course_id = {course} AND deleted_at IS NULL)"""
LIVE_COMMENT_IN_COURSE = """EXISTS (
  SELECT 1 FROM comments c
  JOIN posts p ON p.id = c.post_id
  LEFT JOIN comments r ON r.id = c.parent_id
  WHERE c.id = {target} AND c.deleted_at IS NULL AND p.course_id = {course}
    AND p.deleted_at IS NULL AND (r.id IS NULL OR r.deleted_at IS NULL))"""


async def is_member(pool: asyncpg.Pool, course_id: int, user_id: int) -> bool:
    """Whether the user is enrolled in the course (a primary-key lookup)."""
    return await pool.fetchval(IS_MEMBER, course_id, user_id) is not None


async def member_role(pool: asyncpg.Pool, course_id: int, user_id: int) -> str | None:
    """The user's role in the course ('student' or 'teacher'), None when not enrolled."""
    role: str | None = await pool.fetchval(MEMBER_ROLE, course_id, user_id)
    return role


_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(value: datetime) -> dict[str, int]:
    """A timestamp column as a Timestamp's fields (a dict a message constructor copies in: much
    cheaper than a Timestamp object per value)."""
    delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
    return {"seconds": delta.days * 86_400 + delta.seconds, "nanos": delta.microseconds * 1000}


def post_fields(row: Any) -> dict[str, Any]:
    """A posts row (POST_COLUMNS) as Post fields, for a message constructor."""
    return _fields(row, _POST_FIELDS)


def comment_fields(row: Any) -> dict[str, Any]:
    """A comments row (COMMENT_COLUMNS) as Comment fields; a NULL leaves its optional unset."""
    return _fields(row, _COMMENT_FIELDS)


# What a thread page reads beyond COMMENT_COLUMNS: whether and by whom a comment was removed.
REMOVAL_COLUMNS = "removed_by, removal_reason, deleted_at AS removed_at"


def thread_comment_fields(row: Any) -> dict[str, Any]:
    """A thread page's row (COMMENT_COLUMNS, REMOVAL_COLUMNS) as Comment fields: a comment a
    teacher removed is its placeholder, without its text, and without the replies that went
    with it."""
    fields = comment_fields(row)
    if row["removed_at"] is not None:
        fields.update(
            body="",
            reply_count=0,
            removed_by=row["removed_by"],
            removal_reason=row["removal_reason"],
            removed_at=_timestamp(row["removed_at"]),
        )
    return fields


def removal_fields(row: Any) -> dict[str, Any]:
    """A deleted comment's removal (the columns removed_by, removal_reason, deleted_at) as
    Comment fields: empty when its author deleted it."""
    if row["removed_by"] is None:
        return {}
    return {
        "removed_by": row["removed_by"],
        "removal_reason": row["removal_reason"],
        "removed_at": _timestamp(row["deleted_at"]),
    }


def _fields(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    fields = {name: row[name] for name in names}
    fields["created_at"] = _timestamp(row["created_at"])
    edited = row["edited_at"]
    fields["edited_at"] = None if edited is None else _timestamp(edited)
    return fields


REVISION_COLUMNS = "id, title, body, written_at, replaced_at, replaced_by"


def revision_fields(row: Any) -> dict[str, Any]:
    """A revisions row (REVISION_COLUMNS; title NULL for a comment's) as Revision fields."""
    return {
        "id": row["id"],
        "title": row["title"],
        "body": row["body"],
        "written_at": _timestamp(row["written_at"]),
        "replaced_at": _timestamp(row["replaced_at"]),
        "replaced_by": row["replaced_by"],
    }


# course_members.role as the CourseRole enum.
COURSE_ROLES = {"student": forum_pb2.COURSE_ROLE_STUDENT, "teacher": forum_pb2.COURSE_ROLE_TEACHER}


def membership_fields(row: Any) -> dict[str, Any]:
    """A membership row (course_id, title, role, joined_at) as Membership fields."""
    return {
        "course_id": row["course_id"],
        "title": row["title"],
        "role": COURSE_ROLES[row["role"]],
        "joined_at": _timestamp(row["joined_at"]),
    }


MODERATION_KINDS = {
    "delete": forum_pb2.MODERATION_KIND_DELETE,
    "edit": forum_pb2.MODERATION_KIND_EDIT,
}
MODERATION_COLUMNS = (
    "id, course_id, moderator_id, action, post_id, comment_id, author_id, reason, created_at"
)


def moderation_fields(row: Any) -> dict[str, Any]:
    """A moderation_actions row (MODERATION_COLUMNS) as ModerationAction fields."""
    return {
        "id": row["id"],
        "course_id": row["course_id"],
        "moderator_id": row["moderator_id"],
        "kind": MODERATION_KINDS[row["action"]],
        "post_id": row["post_id"],
        "comment_id": row["comment_id"],
        "author_id": row["author_id"],
        "reason": row["reason"],
        "created_at": _timestamp(row["created_at"]),
    }


def post_from_row(row: Any) -> forum_pb2.Post:
    return forum_pb2.Post(**post_fields(row))


def comment_from_row(row: Any) -> forum_pb2.Comment:
    return forum_pb2.Comment(**comment_fields(row))


async def require_enrolled(enrolled: bool, context: grpc.aio.ServicerContext) -> None:
    """PERMISSION_DENIED unless the acting user is enrolled (checked before anything else)."""
    if not enrolled:
        await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
