"""The ForumWriteService RPC surface: checks, enrolment, then one statement per write; once it
committed, its course event goes to the course's live feed."""

from __future__ import annotations

import logging

import grpc
from agora.forum.v1 import forum_write_service_pb2 as pb
from agora.forum.v1 import forum_write_service_pb2_grpc as pb_grpc

from services.domain.forum import comment_from_row, post_from_row, require_enrolled
from services.domain.ids import MAX_ROW_ID, check_row_id
from services.domain.text import MAX_BODY, MAX_TITLE, check_text
from services.ingest.forum_live import CourseOutbox
from services.ingest.forum_repository import ForumWriteRepository, Written
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.likes import AccessSignal

log = logging.getLogger(__name__)


def check_ids(**ids: int) -> list[FieldViolation]:
    return [v for name, value in ids.items() if (v := check_row_id(value, name)) is not None]


class ForumWriteHandlers(pb_grpc.ForumWriteServiceServicer):
    """Posts, comments, replies and their soft deletes. A delete, once committed, resets its
    course's access version, so the likes service stops taking likes of the target at once."""

    def __init__(
        self,
        repo: ForumWriteRepository,
        access: AccessSignal | None = None,
        outbox: CourseOutbox | None = None,
    ) -> None:
        self._repo = repo
        self._access = access
        self._outbox = outbox

    async def _committed(self, written: Written) -> None:
        """Publish the write's event (it committed with the write; see forum_live.py)."""
        if self._outbox is not None and written.event is not None:
            await self._outbox.publish(written.event)

    async def _deleted(self, course_id: int) -> None:
        """After a delete committed (each is one autocommitted statement). Without the signal the
        likes service stops within ACCESS_CACHE_SECONDS anyway, and the flusher never stores a
        like of a deleted target: the delete stands and is answered."""
        if self._access is None:
            return
        try:
            await self._access.changed(course_id)
        except REDIS_ERRORS as exc:
            log.warning("deleted in course %d, the likes service not told: %s", course_id, exc)

    async def CreatePost(
        self, request: pb.CreatePostRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePostResponse:
        problems = check_ids(course_id=request.course_id, user_id=request.user_id)
        for violation in (
            check_text(request.title, "title", MAX_TITLE),
            check_text(request.body, "body", MAX_BODY),
        ):
            if violation:
                problems.append(violation)
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        written = await self._repo.create_post(
            request.course_id, request.user_id, request.title.strip(), request.body
        )
        await self._committed(written)
        return pb.CreatePostResponse(post=post_from_row(written.row))

    async def CreateComment(
        self, request: pb.CreateCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateCommentResponse:
        problems = check_ids(
            course_id=request.course_id, post_id=request.post_id, user_id=request.user_id
        )
        body = check_text(request.body, "body", MAX_BODY)
        if body:
            problems.append(body)
        if request.HasField("parent_id") and not 0 < request.parent_id <= MAX_ROW_ID:
            problems.append(FieldViolation("parent_id", "must be a comment id"))
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        post = await self._repo.find_post(request.post_id)
        if post is None or post.course_id != request.course_id:
            await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")

        if not request.HasField("parent_id"):
            written = await self._repo.create_comment(
                request.course_id, request.post_id, request.user_id, request.body
            )
            if written is None:  # deleted meanwhile
                await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")
            await self._committed(written)
            return pb.CreateCommentResponse(comment=comment_from_row(written.row))

        parent = await self._repo.find_parent(request.parent_id)
        if parent is None or parent.deleted:
            await abort_invalid(context, [FieldViolation("parent_id", "no such comment")])
        if parent.post_id != request.post_id:
            await abort_invalid(context, [FieldViolation("parent_id", "belongs to another post")])
        # Two levels only, never an unbounded tree: a reply to a reply goes under its root
        # comment and remembers which reply, and whose, it answered.
        reply_to = (parent.id, parent.user_id) if parent.is_reply else None
        written = await self._repo.create_reply(
            request.course_id,
            request.post_id,
            parent.root_id,
            request.user_id,
            request.body,
            reply_to,
        )
        if written is None:
            await abort_invalid(
                context, [FieldViolation("parent_id", "the comment thread was deleted")]
            )
        await self._committed(written)
        return pb.CreateCommentResponse(comment=comment_from_row(written.row))

    async def DeletePost(
        self, request: pb.DeletePostRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeletePostResponse:
        problems = check_ids(
            course_id=request.course_id, post_id=request.post_id, user_id=request.user_id
        )
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        post = await self._repo.find_post(request.post_id)
        if post is None or post.course_id != request.course_id:
            await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")
        if post.user_id != request.user_id:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, "only the author can delete")
        deleted = await self._repo.delete_post(request.course_id, request.post_id, request.user_id)
        if deleted is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")
        await self._deleted(request.course_id)
        await self._committed(deleted)
        return pb.DeletePostResponse()

    async def DeleteComment(
        self, request: pb.DeleteCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCommentResponse:
        problems = check_ids(
            course_id=request.course_id, comment_id=request.comment_id, user_id=request.user_id
        )
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        comment = await self._repo.find_comment(request.comment_id)
        if comment is None or comment.course_id != request.course_id:
            await abort(context, grpc.StatusCode.NOT_FOUND, "comment not found in this course")
        if comment.user_id != request.user_id:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, "only the author can delete")
        deleted = await self._repo.delete_comment(
            comment.course_id, request.comment_id, request.user_id
        )
        if deleted is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "comment not found in this course")
        await self._deleted(comment.course_id)
        await self._committed(deleted)
        return pb.DeleteCommentResponse()
