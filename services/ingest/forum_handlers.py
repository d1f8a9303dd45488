"""The ForumWriteService RPC surface: enrolment, then one statement per write (the fields are
checked before, by services/domain/field_rules.py); once a write committed, its course event
goes to the course's live feed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import grpc
from agora.forum.v1 import forum_write_service_pb2 as pb
from agora.forum.v1 import forum_write_service_pb2_grpc as pb_grpc
from asyncpg import Record
from google.protobuf.message import Message

from services.domain.forum import (
    NOT_ENROLLED,
    TEACHER,
    comment_from_row,
    post_from_row,
)
from services.domain.idempotency import fingerprint, refused_as_grpc
from services.domain.text import reason_or_none
from services.ingest.forum_live import CourseOutbox
from services.ingest.forum_repository import (
    Author,
    Edit,
    ForumWriteRepository,
    Once,
    Replayed,
    Written,
)
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.like_cache import AccessSignal

log = logging.getLogger(__name__)

POST_NOT_FOUND = "post not found in this course"
COMMENT_NOT_FOUND = "comment not found in this course"

# What a create answers: its row (a post, always), or None (a comment whose post went away).
W = TypeVar("W", Written, Written | None)

# The requests of an enrolled user's write: its course and its user.
Enrolling = (
    pb.CreatePostRequest
    | pb.CreateCommentRequest
    | pb.DeletePostRequest
    | pb.DeleteCommentRequest
    | pb.EditPostRequest
    | pb.EditCommentRequest
)


class ForumWriteHandlers(pb_grpc.ForumWriteServiceServicer):
    """Posts, comments, replies and their soft deletes. A delete, once committed, resets its
    course's access version, so the likes service stops taking likes of the target at once."""

    def __init__(
        self,
        repo: ForumWriteRepository,
        access: AccessSignal | None = None,
        outbox: CourseOutbox | None = None,
        edit_window: timedelta = timedelta(days=1),
    ) -> None:
        self._repo = repo
        self._access = access
        self._outbox = outbox
        self._edit_window = edit_window

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

    async def _require_enrolled(self, request: Enrolling, context: grpc.aio.ServicerContext) -> str:
        """The request's user's role in its course; PERMISSION_DENIED unless enrolled."""
        role = await self._repo.role(request.course_id, request.user_id)
        if role is None:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
        return role

    async def CreatePost(
        self, request: pb.CreatePostRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePostResponse:
        once = _once(request, _post_response)
        if earlier := await self._earlier(once, context):
            return pb.CreatePostResponse.FromString(earlier)
        await self._require_enrolled(request, context)
        written = await self._created(
            context,
            self._repo.create_post(
                request.course_id, request.user_id, request.title.strip(), request.body, once
            ),
        )
        if isinstance(written, bytes):
            return pb.CreatePostResponse.FromString(written)
        await self._committed(written)
        return _post_response(written.row)

    async def CreateComment(
        self, request: pb.CreateCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateCommentResponse:
        once = _once(request, _comment_response)
        if earlier := await self._earlier(once, context):
            return pb.CreateCommentResponse.FromString(earlier)
        await self._require_enrolled(request, context)
        await _in_course(
            context,
            await self._repo.find_post(request.post_id),
            request.course_id,
            POST_NOT_FOUND,
        )

        if not request.HasField("parent_id"):
            written = await self._created(
                context,
                self._repo.create_comment(
                    request.course_id, request.post_id, request.user_id, request.body, once
                ),
            )
            if written is None:  # deleted meanwhile
                await abort(context, grpc.StatusCode.NOT_FOUND, POST_NOT_FOUND)
        else:
            parent = await self._repo.find_parent(request.parent_id)
            if parent is None or parent.deleted:
                await abort_invalid(context, [FieldViolation("parent_id", "no such comment")])
            if parent.post_id != request.post_id:
                await abort_invalid(
                    context, [FieldViolation("parent_id", "belongs to another post")]
                )
            # Two levels only, never an unbounded tree: a reply to a reply goes under its root
            # comment and remembers which reply, and whose, it answered.
            reply_to = (parent.id, parent.user_id) if parent.is_reply else None
            written = await self._created(
                context,
                self._repo.create_reply(
                    request.course_id,
                    request.post_id,
                    parent.root_id,
                    request.user_id,
                    request.body,
                    reply_to,
                    once,
                ),
            )
            if written is None:
                await abort_invalid(
                    context, [FieldViolation("parent_id", "the comment thread was deleted")]
                )
        if isinstance(written, bytes):
            return pb.CreateCommentResponse.FromString(written)
        await self._committed(written)
        return _comment_response(written.row)

    async def _earlier(self, once: Once | None, context: grpc.aio.ServicerContext) -> bytes:
        """The response a create with this key answered before (empty when none): a repeat
        answers it without looking at the course again."""
        if once is None:
            return b""
        async with refused_as_grpc(context):
            earlier = await self._repo.earlier(once)
        return b"" if earlier is None else earlier.response

    async def _created(
        self, context: grpc.aio.ServicerContext, create: Awaitable[W | Replayed]
    ) -> W | bytes:
        """A create's outcome: what it wrote, or the response a call with its key committed
        meanwhile; ABORTED while that call runs, INVALID_ARGUMENT if it was another request."""
        async with refused_as_grpc(context):
            created = await create
        return created.response if isinstance(created, Replayed) else created

    async def DeletePost(
        self, request: pb.DeletePostRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeletePostResponse:
        await self._delete(
            request,
            context,
            "post_id",
            self._repo.find_post,
            self._repo.delete_post,
            POST_NOT_FOUND,
        )
        return pb.DeletePostResponse()

    async def DeleteComment(
        self, request: pb.DeleteCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCommentResponse:
        await self._delete(
            request,
            context,
            "comment_id",
            self._repo.find_comment,
            self._repo.delete_comment,
            COMMENT_NOT_FOUND,
        )
        return pb.DeleteCommentResponse()

    async def _delete(
        self,
        request: pb.DeletePostRequest | pb.DeleteCommentRequest,
        context: grpc.aio.ServicerContext,
        target: str,
        find: Callable[[int], Awaitable[Author | None]],
        delete: Callable[[int, int, int, str | None], Awaitable[Written | None]],
        not_found: str,
    ) -> None:
        """Deletes the post or comment (the request's `target` field) of the request's course,
        the user's own or, as the course's teacher, anyone's: NOT_FOUND when it is not there (or
        went away meanwhile), PERMISSION_DENIED for another member's as a student. The statement
        checks the same rule again, so a role lost meanwhile deletes nothing."""
        target_id: int = getattr(request, target)
        role = await self._require_enrolled(request, context)
        author = await _in_course(context, await find(target_id), request.course_id, not_found)
        if author.user_id != request.user_id and role != TEACHER:
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "only the author or a teacher of the course can delete it",
            )
        reason = reason_or_none(request.reason) if request.HasField("reason") else None
        deleted = await delete(request.course_id, target_id, request.user_id, reason)
        if deleted is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, not_found)
        await self._deleted(request.course_id)
        await self._committed(deleted)

    async def EditPost(
        self, request: pb.EditPostRequest, context: grpc.aio.ServicerContext
    ) -> pb.EditPostResponse:
        edit = await self._may_edit(
            request, context, request.post_id, self._repo.find_post, POST_NOT_FOUND
        )
        has = request.HasField
        edited = await self._repo.edit_post(
            edit,
            request.title.strip() if has("title") else None,
            request.body if has("body") else None,
        )
        if edited is None:  # deleted meanwhile (or the window closed in between)
            await abort(context, grpc.StatusCode.NOT_FOUND, POST_NOT_FOUND)
        await self._committed(edited)
        return pb.EditPostResponse(post=post_from_row(edited.row))

    async def EditComment(
        self, request: pb.EditCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.EditCommentResponse:
        edit = await self._may_edit(
            request, context, request.comment_id, self._repo.find_comment, COMMENT_NOT_FOUND
        )
        edited = await self._repo.edit_comment(edit, request.body)
        if edited is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, COMMENT_NOT_FOUND)
        await self._committed(edited)
        return pb.EditCommentResponse(comment=comment_from_row(edited.row))

    async def _may_edit(
        self,
        request: pb.EditPostRequest | pb.EditCommentRequest,
        context: grpc.aio.ServicerContext,
        target_id: int,
        find: Callable[[int], Awaitable[Author | None]],
        not_found: str,
    ) -> Edit:
        """The edit a request asks for, once allowed: PERMISSION_DENIED unless enrolled, NOT_FOUND
        unless the target is live in the course, PERMISSION_DENIED for another member's as a
        student or one's own past the edit window (a teacher edits any at any time). The edit's
        statement checks the same rule again."""
        role = await self._require_enrolled(request, context)
        author = await _in_course(context, await find(target_id), request.course_id, not_found)
        if role != TEACHER:
            if author.user_id != request.user_id:
                await abort(
                    context,
                    grpc.StatusCode.PERMISSION_DENIED,
                    "only the author or a teacher of the course can edit it",
                )
            if datetime.now(UTC) - author.created_at >= self._edit_window:
                await abort(
                    context,
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"it can be edited by its author for {_duration(self._edit_window)} after "
                    "writing it; that time has passed, so only a teacher of the course can edit it",
                )
        return Edit(
            course_id=request.course_id,
            target_id=target_id,
            user_id=request.user_id,
            window=self._edit_window,
            reason=reason_or_none(request.reason) if request.HasField("reason") else None,
        )


def _post_response(row: Record) -> pb.CreatePostResponse:
    return pb.CreatePostResponse(post=post_from_row(row))


def _comment_response(row: Record) -> pb.CreateCommentResponse:
    return pb.CreateCommentResponse(comment=comment_from_row(row))


def _once(
    request: pb.CreatePostRequest | pb.CreateCommentRequest,
    response: Callable[[Record], Message],
) -> Once | None:
    """The create's key and fingerprint, None when the request has no key."""
    if not request.idempotency_key:
        return None
    return Once(
        user_id=request.user_id,
        key=request.idempotency_key,
        fingerprint=fingerprint(request),
        response=lambda row: response(row).SerializeToString(),
    )


def _duration(span: timedelta) -> str:
    """An edit window as people say it: '1 day', '15 minutes', '90 seconds'."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


async def _in_course(
    context: grpc.aio.ServicerContext, author: Author | None, course_id: int, not_found: str
) -> Author:
    """A looked-up post or comment, NOT_FOUND unless it is there and in the course."""
    if author is None or author.course_id != course_id:
        await abort(context, grpc.StatusCode.NOT_FOUND, not_found)
    return author
