"""A course's posts: created, deleted (their author, or a teacher of the course: logged) and
edited (their replaced texts kept as revisions), each in one statement."""

from __future__ import annotations

from services.domain.forum import POST_COLUMNS, TEACHES_COURSE, post_from_row, qualified
from services.ingest.forum_repository.edit_sql import as_edited, may_edit
from services.ingest.forum_repository.keys import Once, Replayed
from services.ingest.forum_repository.writes import Author, Edit, Writes, Written
from services.streams.course_events import post_event

INSERT_POST = f"""
INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, $3, $4)
RETURNING {POST_COLUMNS}"""

FIND_POST = "SELECT course_id, user_id, created_at FROM posts WHERE id = $1 AND deleted_at IS NULL"

# The author deletes their own post; a teacher of the post's course deletes anyone's, and a
# teacher's delete of another member's post is logged in the same statement ($4: the reason).
DELETE_POST = f"""
WITH del AS (
  UPDATE posts SET deleted_at = now(), version = version + 1
  WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL
    AND (user_id = $3 OR {TEACHES_COURSE.format(course="$2", user="$3")})
  RETURNING {POST_COLUMNS}, deleted_at),
logged AS (
  INSERT INTO moderation_actions (course_id, moderator_id, action, post_id, author_id, reason)
  SELECT course_id, $3, 'delete', id, user_id, $4 FROM del WHERE user_id <> $3)
SELECT {POST_COLUMNS}, deleted_at FROM del"""

# An edit: the row as it was (locked), the update (only when the text changes), the replaced
# text as a revision and, for a teacher's edit of another member's post, the moderation log's
# row, all in one statement; then the row as it is now, with whether it changed. $1 the post,
# $2 the course, $3 the user, $4/$5 the new title/body (NULL: keep), $6 the window, $7 the reason.
EDIT_POST = f"""
WITH old AS (
  SELECT id, course_id, user_id, title, body, COALESCE(edited_at, created_at) AS written_at
  FROM posts o
  WHERE id = $1 AND course_id = $2 AND deleted_at IS NULL
    AND {may_edit("o", "$6")}
  FOR UPDATE),
upd AS (
  UPDATE posts p
  SET title = COALESCE($4, p.title), body = COALESCE($5, p.body), edited_at = now(),
    version = p.version + 1
  FROM old
  WHERE p.id = old.id
    AND (old.title, old.body) IS DISTINCT FROM (COALESCE($4, old.title), COALESCE($5, old.body))
  RETURNING {qualified(POST_COLUMNS, "p")}),
revised AS (
  INSERT INTO post_revisions (post_id, title, body, written_at, replaced_by)
  SELECT old.id, old.title, old.body, old.written_at, $3 FROM old JOIN upd ON upd.id = old.id),
logged AS (
  INSERT INTO moderation_actions (course_id, moderator_id, action, post_id, author_id, reason)
  SELECT old.course_id, $3, 'edit', old.id, old.user_id, $7
  FROM old JOIN upd ON upd.id = old.id WHERE old.user_id <> $3)
{as_edited(POST_COLUMNS, "posts")}"""


class PostWrites(Writes):
    async def create_post(
        self, course_id: int, user_id: int, title: str, body: str, once: Once | None = None
    ) -> Written | Replayed:
        written = await self._create(
            INSERT_POST,
            (course_id, user_id, title, body),
            lambda r: post_event(course_id, post_from_row(r)),
            once,
        )
        if written is None:  # an INSERT … RETURNING always returns its row
            raise RuntimeError("INSERT INTO posts returned no row")
        return written

    async def find_post(self, post_id: int) -> Author | None:
        """The author and course of a live post."""
        return await self._author(FIND_POST, post_id)

    async def delete_post(
        self, course_id: int, post_id: int, user_id: int, reason: str | None
    ) -> Written | None:
        """The post as deleted, or None when it was not a live post of the course the user may
        delete (their own, or any as a teacher of the course)."""
        return await self._write(
            DELETE_POST,
            (post_id, course_id, user_id, reason),
            lambda r: post_event(course_id, post_from_row(r), r["deleted_at"]),
        )

    async def edit_post(self, edit: Edit, title: str | None, body: str | None) -> Written | None:
        """The post after the edit (with no event when the edit changed nothing); None when it
        is not a live post of the course the user may edit (gone meanwhile, or the window
        closed)."""
        return await self._edit(
            EDIT_POST, edit, (title, body), lambda r: post_event(edit.course_id, post_from_row(r))
        )
