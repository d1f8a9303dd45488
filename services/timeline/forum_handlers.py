"""The ForumReadService RPC surface (the requests' fields are checked before, by the rules in
services/domain/field_rules.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from agora.events.v1 import live_events_pb2
from agora.forum.v1 import forum_read_service_pb2 as pb
from agora.forum.v1 import forum_read_service_pb2_grpc as pb_grpc
from agora.forum.v1 import like_service_pb2 as like_pb
from asyncpg import Record
from google.protobuf.message import Message

from services.domain.forum import (
    NOT_A_TEACHER,
    NOT_ENROLLED,
    comment_fields,
    membership_fields,
    moderation_fields,
    post_fields,
    require_enrolled,
    revision_fields,
    thread_comment_fields,
)
from services.domain.ids import check_row_id
from services.domain.paging import Page
from services.domain.people import PeopleDirectory, put_names
from services.runtime.grpc_errors import abort, abort_invalid
from services.runtime.timeutil import timestamp_fields, to_datetime, to_timestamp
from services.timeline.forum_repository import Checked, ForumReadRepository
from services.timeline.watch import Watches, feed_response

POST_NOT_FOUND = "post not found in this course"
COMMENT_NOT_FOUND = "comment not found in this course"

# A thread's read: (course_id, post or comment id, user_id, limit, after_id) → its page.
ThreadRead = Callable[[int, int, int, int, int | None], Awaitable[tuple[Checked, Page[Record]]]]
Response = TypeVar("Response", bound=Message)

# (id field, name field) of the people each object names.
AUTHOR = (("user_id", "author_name"),)
# A thread's comments name their authors and, on a removed one's placeholder, the teacher.
THREAD = (("user_id", "author_name"), ("removed_by", "removed_by_name"))
LIKER = (("user_id", "name"),)
MODERATION = (("moderator_id", "moderator_name"), ("author_id", "author_name"))


class ForumReadHandlers(pb_grpc.ForumReadServiceServicer):
    """Feeds, posts, comments and replies for enrolled users: one statement per call, which
    answers PERMISSION_DENIED (not enrolled) before NOT_FOUND (no such live post or comment in
    the course) before the page."""

    def __init__(
        self, repo: ForumReadRepository, watches: Watches, people: PeopleDirectory
    ) -> None:
        self._repo = repo
        self._watches = watches
        self._people = people

    async def _named(
        self,
        rows: Sequence[Record],
        to_fields: Callable[[Record], dict[str, Any]],
        pairs: Sequence[tuple[str, str]],
    ) -> list[dict[str, Any]]:
        """The rows as fields, with the names of the people they name: one directory lookup
        for all of them (none for an empty page)."""
        items = [to_fields(r) for r in rows]
        names = await self._people.names(item.get(f) for item in items for f, _ in pairs)
        put_names(items, names, pairs)
        return items

    async def WatchCourse(
        self, request: pb.WatchCourseRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchCourseResponse]:
        # For an end user (the gateway forwards their token): they must be enrolled, and stay so;
        # which needs to know whose watch it is, so this one rule is the handler's.
        for_user = self._watches.token_expires(context) is not None
        if for_user and (violation := check_row_id(request.user_id, "user_id")) is not None:
            await abort_invalid(context, [violation])
        course, user = request.course_id, request.user_id

        async def still_allowed() -> str | None:
            if not for_user or await self._repo.is_member(course, user):
                return None
            return NOT_ENROLLED

        async for response in self._watches.stream(
            context,
            self._watches.feeds.course(course),
            request.after,
            ("member", course, user),
            still_allowed,
            _COURSE_RESPONSE,
        ):
            yield response

    async def ListCourses(
        self, request: pb.ListCoursesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCoursesResponse:
        after = request.after_id if request.HasField("after_id") else None
        page = await self._repo.courses(request.user_id, request.limit, after)
        courses = [membership_fields(r) for r in page.rows]
        return _page(pb.ListCoursesResponse, page, "courses", courses, "next_after_id", "course_id")

    async def ListPosts(
        self, request: pb.ListPostsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPostsResponse:
        before = request.before_id if request.HasField("before_id") else None
        checked, page = await self._repo.feed(
            request.course_id, request.user_id, request.limit, before
        )
        await require_enrolled(checked.enrolled, context)
        posts = await self._named(page.rows, post_fields, AUTHOR)
        return _page(pb.ListPostsResponse, page, "posts", posts, "next_before_id")

    async def GetPost(
        self, request: pb.GetPostRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPostResponse:
        read = self._repo.post(request.course_id, request.post_id, request.user_id)
        row = await _visible(read, context, POST_NOT_FOUND)
        (post,) = await self._named([row], post_fields, AUTHOR)
        return pb.GetPostResponse(post=post)

    async def GetComment(
        self, request: pb.GetCommentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCommentResponse:
        read = self._repo.comment(request.course_id, request.comment_id, request.user_id)
        row = await _visible(read, context, COMMENT_NOT_FOUND)
        (comment,) = await self._named([row], comment_fields, AUTHOR)
        return pb.GetCommentResponse(comment=comment)

    async def ListComments(
        self, request: pb.ListCommentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCommentsResponse:
        page = await self._thread_page(request, context, "post_id", self._repo.comments)
        comments = await self._named(page.rows, thread_comment_fields, THREAD)
        return _page(pb.ListCommentsResponse, page, "comments", comments, "next_after_id")

    async def ListReplies(
        self, request: pb.ListRepliesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRepliesResponse:
        page = await self._thread_page(request, context, "comment_id", self._repo.replies)
        replies = await self._named(page.rows, thread_comment_fields, THREAD)
        return _page(pb.ListRepliesResponse, page, "comments", replies, "next_after_id")

    async def ListLikers(
        self, request: pb.ListLikersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListLikersResponse:
        comment = request.target.kind == like_pb.TARGET_KIND_COMMENT
        has = request.HasField
        before = (
            to_datetime(request.before_liked_at) if has("before_liked_at") else None,
            request.before_user_id if has("before_user_id") else None,
        )
        checked, page = await self._repo.likers(
            request.course_id, request.user_id, comment, request.target.id, request.limit, before
        )
        await _require_visible(checked, context, COMMENT_NOT_FOUND if comment else POST_NOT_FOUND)
        rows = page.rows
        likers = await self._named(rows, _liker_fields, LIKER)
        response = pb.ListLikersResponse(likers=likers, has_more=page.has_more)
        if rows:
            response.next_before_liked_at.CopyFrom(to_timestamp(rows[-1]["created_at"]))
            response.next_before_user_id = rows[-1]["user_id"]
        return response

    async def ListRevisions(
        self, request: pb.ListRevisionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRevisionsResponse:
        comment = request.target.kind == like_pb.TARGET_KIND_COMMENT
        before = request.before_id if request.HasField("before_id") else None
        checked, page = await self._repo.revisions(
            request.course_id, request.user_id, comment, request.target.id, request.limit, before
        )
        await _require_visible(checked, context, COMMENT_NOT_FOUND if comment else POST_NOT_FOUND)
        if not checked.allowed:
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "only its author and the course's teachers can read its earlier texts",
            )
        revisions = [revision_fields(r) for r in page.rows]
        return _page(pb.ListRevisionsResponse, page, "revisions", revisions, "next_before_id")

    async def ListModerationActions(
        self, request: pb.ListModerationActionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModerationActionsResponse:
        before = request.before_id if request.HasField("before_id") else None
        checked, page = await self._repo.moderation(
            request.course_id, request.user_id, request.limit, before
        )
        await require_enrolled(checked.enrolled, context)
        if not checked.allowed:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_A_TEACHER)
        actions = await self._named(page.rows, moderation_fields, MODERATION)
        return _page(pb.ListModerationActionsResponse, page, "actions", actions, "next_before_id")

    async def _thread_page(
        self,
        request: pb.ListCommentsRequest | pb.ListRepliesRequest,
        context: grpc.aio.ServicerContext,
        target: str,
        read: ThreadRead,
    ) -> Page[Record]:
        """One page of a thread (a post's comments or a comment's replies), `target` naming the
        request's field of its post or comment."""
        not_found = POST_NOT_FOUND if target == "post_id" else COMMENT_NOT_FOUND
        target_id: int = getattr(request, target)
        after = request.after_id if request.HasField("after_id") else None
        checked, page = await read(
            request.course_id, target_id, request.user_id, request.limit, after
        )
        await _require_visible(checked, context, not_found)
        return page


async def _visible(
    read: Awaitable[Checked], context: grpc.aio.ServicerContext, not_found: str
) -> Record:
    """The one row a read of a post or a comment found, once the caller may see it."""
    checked = await read
    await _require_visible(checked, context, not_found)
    return checked.rows[0]


async def _require_visible(
    checked: Checked, context: grpc.aio.ServicerContext, not_found: str
) -> None:
    await require_enrolled(checked.enrolled, context)
    if not checked.found:
        await abort(context, grpc.StatusCode.NOT_FOUND, not_found)


def _page(
    response_type: Callable[..., Response],
    page: Page[Record],
    field: str,
    items: list[dict[str, Any]],
    cursor: str,
    column: str = "id",
) -> Response:
    """A page as its RPC's response: its rows as `items` (the response's `field`), whether
    there are more and, when it has rows, the next page's `cursor`: its last row's `column`."""
    rows = page.rows
    if not rows:
        return response_type(has_more=page.has_more)
    return response_type(**{field: items, cursor: rows[-1][column]}, has_more=page.has_more)


def _liker_fields(row: Record) -> dict[str, Any]:
    return {"user_id": row["user_id"], "liked_at": timestamp_fields(row["created_at"])}


# A feed entry (an agora.events.v1.CourseEvent) or a reset as the RPC's response.
_COURSE_RESPONSE = feed_response(live_events_pb2.CourseEvent, pb.WatchCourseResponse)
