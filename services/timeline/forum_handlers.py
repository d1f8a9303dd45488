"""The ForumReadService RPC surface."""

from __future__ import annotations

import grpc
from agora.forum.v1 import forum_read_service_pb2 as pb
from agora.forum.v1 import forum_read_service_pb2_grpc as pb_grpc

from services.domain.forum import comment_from_row, post_from_row, require_enrolled
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.timeline.forum_repository import ForumReadRepository

MAX_LIMIT = 100


def _checks(limit: int | None = None, **ids: int) -> list[FieldViolation]:
    problems = [FieldViolation(name, "is required") for name, value in ids.items() if value <= 0]
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        problems.append(FieldViolation("limit", f"must be between 1 and {MAX_LIMIT}"))
    return problems


class ForumReadHandlers(pb_grpc.ForumReadServiceServicer):
    """Feeds, posts, comments and replies for enrolled users."""

    def __init__(self, repo: ForumReadRepository) -> None:
        self._repo = repo

    async def ListPosts(
        self, request: pb.ListPostsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPostsResponse:
        problems = _checks(request.limit, course_id=request.course_id, user_id=request.user_id)
        if request.HasField("before_id") and request.before_id <= 0:
            problems.append(FieldViolation("before_id", "must be a positive id"))
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        before = request.before_id if request.HasField("before_id") else None
        page = await self._repo.feed(request.course_id, request.limit, before)
        response = pb.ListPostsResponse(
            posts=[post_from_row(r) for r in page.rows], has_more=page.has_more
        )
        if page.rows:
            response.next_before_id = page.rows[-1]["id"]
        return response

    async def GetPost(
        self, request: pb.GetPostRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPostResponse:
        problems = _checks(
            course_id=request.course_id, post_id=request.post_id, user_id=request.user_id
        )
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        row = await self._repo.post(request.course_id, request.post_id)
        if row is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")
        return pb.GetPostResponse(post=post_from_row(row))

    async def ListComments(
        self, request: pb.ListCommentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCommentsResponse:
        problems = _checks(
            request.limit,
            course_id=request.course_id,
            post_id=request.post_id,
            user_id=request.user_id,
        )
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        if await self._repo.post(request.course_id, request.post_id) is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, "post not found in this course")
        after = request.after_id if request.HasField("after_id") else None
        page = await self._repo.comments(request.post_id, request.limit, after)
        response = pb.ListCommentsResponse(
            comments=[comment_from_row(r) for r in page.rows], has_more=page.has_more
        )
        if page.rows:
            response.next_after_id = page.rows[-1]["id"]
        return response

    async def ListReplies(
        self, request: pb.ListRepliesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRepliesResponse:
        problems = _checks(
            request.limit,
            course_id=request.course_id,
            comment_id=request.comment_id,
            user_id=request.user_id,
        )
        if problems:
            await abort_invalid(context, problems)
        await require_enrolled(
            await self._repo.is_member(request.course_id, request.user_id), context
        )
        if not await self._repo.visible_root(request.course_id, request.comment_id):
            await abort(context, grpc.StatusCode.NOT_FOUND, "comment not found in this course")
        after = request.after_id if request.HasField("after_id") else None
        page = await self._repo.replies(request.comment_id, request.limit, after)
        response = pb.ListRepliesResponse(
            comments=[comment_from_row(r) for r in page.rows], has_more=page.has_more
        )
        if page.rows:
            response.next_after_id = page.rows[-1]["id"]
        return response
