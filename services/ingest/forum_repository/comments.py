"""A post's comments and their replies: created (each counted on its post, a reply on its root
too), deleted (their author, or a teacher of the course: logged) and edited (their replaced texts
kept as revisions), each in one statement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agora.forum.v1 import forum_pb2

from services.domain.forum import (
    COMMENT_COLUMNS,
    TEACHES_COURSE,
    comment_fields,
    comment_from_row,
    qualified,
    removal_fields,
)
from services.ingest.forum_repository.edit_sql import as_edited, may_edit
from services.ingest.forum_repository.keys import Once, Replayed
from services.ingest.forum_repository.writes import Author, Edit, Writes, Written
from services.streams.course_events import comment_event

# The post must be live and in the course of the request.
INSERT_COMMENT = f"""
WITH target AS (
  SELECT id FROM posts WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL FOR UPDATE),
ins AS (
  INSERT INTO comments (post_id, user_id, body) SELECT id, $3, $4 FROM target
  RETURNING {COMMENT_COLUMNS}),
counted AS (
  UPDATE posts SET comment_count = comment_count + 1 WHERE id IN (SELECT post_id FROM ins))
SELECT {COMMENT_COLUMNS} FROM ins"""

# The parent a reply is written to, with its root (itself when it is top-level) and its post.
FIND_PARENT = """
SELECT c.id, c.post_id, c.parent_id, c.user_id, c.deleted_at IS NOT NULL AS deleted,
       p.course_id, p.deleted_at IS NOT NULL AS post_deleted
FROM comments c JOIN posts p ON p.id = c.post_id
WHERE c.id = $1"""

# Insert only if the root is still a live top-level comment of a live post of the course; bump
# the root's reply_count and the post's comment_count in the same statement.
INSERT_REPLY = f"""
WITH root AS (
  SELECT c.id, c.post_id FROM comments c JOIN posts p ON p.id = c.post_id
  WHERE c.id = $1 AND c.parent_id IS NULL AND c.deleted_at IS NULL
    AND p.id = $2 AND p.course_id = $3 AND p.deleted_at IS NULL
  FOR UPDATE OF c),
ins AS (
  INSERT INTO comments (post_id, parent_id, user_id, body, reply_to_comment_id, reply_to_user_id)
  SELECT post_id, id, $4, $5, $6, $7 FROM root
  RETURNING {COMMENT_COLUMNS}),
replies AS (
  UPDATE comments SET reply_count = reply_count + 1 WHERE id IN (SELECT parent_id FROM ins)),
counted AS (
  UPDATE posts SET comment_count = comment_count + 1 WHERE id IN (SELECT post_id FROM ins))
SELECT {COMMENT_COLUMNS} FROM ins"""

FIND_COMMENT = """
SELECT c.user_id, p.course_id, c.created_at
FROM comments c JOIN posts p ON p.id = c.post_id
LEFT JOIN comments r ON r.id = c.parent_id
WHERE c.id = $1 AND c.deleted_at IS NULL AND p.deleted_at IS NULL
  AND (r.id IS NULL OR r.deleted_at IS NULL)"""

# A deleted reply leaves its root's reply_count and, while the root is visible, the post's
# comment_count; a deleted root takes itself and its visible replies out of the post's count. Row
# locks on the root order a concurrent reply/delete pair, and each side reads the other's result.
# The author ($2) deletes their own comment; a teacher of the comment's course ($3, checked
# against the course of the comment's post) anyone's, logged with the reason ($4).
DELETE_COMMENT = f"""
WITH del AS (
  UPDATE comments c SET deleted_at = now(), version = c.version + 1,
    removed_by = CASE WHEN c.user_id <> $2 THEN $2 END,
    removal_reason = CASE WHEN c.user_id <> $2 THEN $4 END
  WHERE id = $1 AND deleted_at IS NULL
    AND (user_id = $2 OR EXISTS (
      SELECT 1 FROM posts p WHERE p.id = c.post_id AND p.course_id = $3
        AND {TEACHES_COURSE.format(course="p.course_id", user="$2")}))
  RETURNING {COMMENT_COLUMNS}, deleted_at, removed_by, removal_reason),
root AS (
  UPDATE comments r SET reply_count = r.reply_count - 1
  FROM del WHERE r.id = del.parent_id
  RETURNING r.deleted_at IS NULL AS visible),
counted AS (
  UPDATE posts p SET comment_count = p.comment_count - CASE
      WHEN del.parent_id IS NULL THEN 1 + del.reply_count
      WHEN (SELECT visible FROM root) THEN 1
      ELSE 0 END
  FROM del WHERE p.id = del.post_id),
logged AS (
  INSERT INTO moderation_actions
    (course_id, moderator_id, action, post_id, comment_id, author_id, reason)
  SELECT $3, $2, 'delete', post_id, id, user_id, $4 FROM del WHERE user_id <> $2)
SELECT {COMMENT_COLUMNS}, deleted_at, removed_by, removal_reason FROM del"""

# A comment's edit, as a post's (posts.py): $1 the comment, $2 the course, $3 the user, $4 the new
# body, $5 the window, $6 the reason. The comment, its root and its post must be live and in the
# course.
EDIT_COMMENT = f"""
WITH old AS (
  SELECT c.id, c.post_id, c.user_id, c.body, COALESCE(c.edited_at, c.created_at) AS written_at
  FROM comments c JOIN posts p ON p.id = c.post_id
  LEFT JOIN comments r ON r.id = c.parent_id
  WHERE c.id = $1 AND c.deleted_at IS NULL AND p.course_id = $2 AND p.deleted_at IS NULL
    AND (r.id IS NULL OR r.deleted_at IS NULL)
    AND {may_edit("c", "$5")}
  FOR UPDATE OF c),
upd AS (
  UPDATE comments x SET body = $4, edited_at = now(), version = x.version + 1
  FROM old
  WHERE x.id = old.id AND old.body IS DISTINCT FROM $4
  RETURNING {qualified(COMMENT_COLUMNS, "x")}),
revised AS (
  INSERT INTO comment_revisions (comment_id, body, written_at, replaced_by)
  SELECT old.id, old.body, old.written_at, $3 FROM old JOIN upd ON upd.id = old.id),
logged AS (
  INSERT INTO moderation_actions
    (course_id, moderator_id, action, post_id, comment_id, author_id, reason)
  SELECT $2, $3, 'edit', old.post_id, old.id, old.user_id, $6
  FROM old JOIN upd ON upd.id = old.id WHERE old.user_id <> $3)
{as_edited(COMMENT_COLUMNS, "comments")}"""


@dataclass(frozen=True)
class Parent:
    id: int
    post_id: int
    root_id: int
    user_id: int
    is_reply: bool
    deleted: bool
    course_id: int
    post_deleted: bool


class CommentWrites(Writes):
    async def create_comment(
        self, course_id: int, post_id: int, user_id: int, body: str, once: Once | None = None
    ) -> Written | Replayed | None:
        """The new top-level comment, or None when the post is not live in the course."""
        return await self._create(
            INSERT_COMMENT,
            (post_id, course_id, user_id, body),
            lambda r: comment_event(course_id, comment_from_row(r)),
            once,
        )

    async def find_parent(self, comment_id: int) -> Parent | None:
        row = await self._pool.fetchrow(FIND_PARENT, comment_id)
        if row is None:
            return None
        is_reply = row["parent_id"] is not None
        return Parent(
            id=row["id"],
            post_id=row["post_id"],
            root_id=row["parent_id"] if is_reply else row["id"],
            user_id=row["user_id"],
            is_reply=is_reply,
            deleted=row["deleted"],
            course_id=row["course_id"],
            post_deleted=row["post_deleted"],
        )

    async def create_reply(
        self,
        course_id: int,
        post_id: int,
        root_id: int,
        user_id: int,
        body: str,
        reply_to: tuple[int, int] | None,
        once: Once | None = None,
    ) -> Written | Replayed | None:
        """The new reply under `root_id`, or None when the root or its post went away."""
        to_comment, to_user = reply_to if reply_to else (None, None)
        return await self._create(
            INSERT_REPLY,
            (root_id, post_id, course_id, user_id, body, to_comment, to_user),
            lambda r: comment_event(course_id, comment_from_row(r)),
            once,
        )

    async def find_comment(self, comment_id: int) -> Author | None:
        """The author and course of a visible comment."""
        return await self._author(FIND_COMMENT, comment_id)

    async def delete_comment(
        self, course_id: int, comment_id: int, user_id: int, reason: str | None
    ) -> Written | None:
        """The comment as deleted, or None when it was not a visible comment the user may delete
        (their own, or any of the course as its teacher)."""
        return await self._write(
            DELETE_COMMENT,
            (comment_id, user_id, course_id, reason),
            lambda r: comment_event(course_id, removed_comment(r), r["deleted_at"]),
        )

    async def edit_comment(self, edit: Edit, body: str) -> Written | None:
        """As edit_post, for a comment or reply."""
        return await self._edit(
            EDIT_COMMENT,
            edit,
            (body,),
            lambda r: comment_event(edit.course_id, comment_from_row(r)),
        )


def removed_comment(row: Any) -> forum_pb2.Comment:
    """A deleted comment as its event names it: with who removed it and why when a teacher did,
    so a thread shows its placeholder live."""
    return forum_pb2.Comment(**comment_fields(row), **removal_fields(row))
