"""Course forum routes: your courses, and in a course its feed, posts, comments, replies, create,
edit (with their earlier texts) and delete, who liked what, and the teachers' moderation log.

The token's subject is the acting user; the services check enrolment (403) and that the post or
comment belongs to the course of the URL (404).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from agora.forum.v1 import forum_pb2
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from fastapi import APIRouter

from services.gateway import schemas
from services.gateway.auth import CurrentUser, Principal
from services.gateway.clients import Clients, RequestClients
from services.gateway.convert import (
    JsonBytes,
    comment_json,
    membership_json,
    moderation_json,
    ok,
    optional_time,
    optional_value,
    page,
    post_json,
    revision_json,
    time_text,
)
from services.gateway.params import (
    CourseId,
    CursorId,
    IdempotencyKey,
    LikersLimit,
    Limit,
    Reason,
    RowId,
    TimeCursor,
    request_time,
)
from services.gateway.rate_limit import FORUM_WRITE, LikeLimiter, RateLimiter

log = logging.getLogger(__name__)

Row = TypeVar("Row", forum_pb2.Post, forum_pb2.Comment)

router = APIRouter(prefix="/api/courses/{course_id}", tags=["forum"])
# The caller's own courses: the one forum route outside a course.
courses_router = APIRouter(prefix="/api/courses", tags=["forum"])

_DELETED = {"data": {"deleted": True}}


async def liked_by_me_or_unknown(
    clients: Clients, user: Principal, course_id: int, targets: list[Target]
) -> list[bool | None]:
    """liked_by_me for each target: one LikedMap call (one SMISMEMBER); None if unavailable."""
    if not targets:
        return []
    try:
        reply = await clients.likes.LikedMap(
            like_pb.LikedMapRequest(user_id=user.user_id, course_id=course_id, targets=targets),
            **clients.options,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise
        # The page is still worth showing; the UI learns the like state is unknown.
        log.warning("likes unavailable, liked_by_me unknown: %s", exc.details())
        return [None] * len(targets)
    return list(reply.liked)


async def _with_likes(
    clients: Clients,
    user: Principal,
    course_id: int,
    targets: Callable[[list[int]], list[Target]],
    to_json: Callable[[Row, bool | None], dict[str, Any]],
    rows: Sequence[Row],
) -> list[dict[str, Any]]:
    """Each post or comment as JSON with its liked_by_me, all asked in one LikedMap call."""
    liked = await liked_by_me_or_unknown(clients, user, course_id, targets([r.id for r in rows]))
    return [to_json(row, flag) for row, flag in zip(rows, liked, strict=True)]


# A like_pb.Target as the fields the request's constructor copies in (cheaper than a message each).
Target = dict[str, int]


def _posts(ids: list[int]) -> list[Target]:
    return [{"kind": like_pb.TARGET_KIND_POST, "id": i} for i in ids]


def _comments(ids: list[int]) -> list[Target]:
    return [{"kind": like_pb.TARGET_KIND_COMMENT, "id": i} for i in ids]


@courses_router.get(
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


@router.get("/posts", summary="The course feed, newest first", response_model=schemas.PostsPage)
async def list_posts(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    limit: Limit = 20,
    before_id: CursorId = None,
) -> JsonBytes:
    rpc = read_pb.ListPostsRequest(
        course_id=course_id, user_id=user.user_id, limit=limit, before_id=before_id
    )
    reply = await clients.forum_read.ListPosts(rpc, **clients.options)
    data = await _with_likes(clients, user, course_id, _posts, post_json, reply.posts)
    return page(data, limit, reply.has_more, next_before_id=optional_value(reply, "next_before_id"))


@router.post(
    "/posts",
    summary="Create a post",
    response_model=schemas.PostResponse,
    status_code=201,
    dependencies=[FORUM_WRITE],
)
async def create_post(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    body: schemas.NewPost,
    idempotency_key: IdempotencyKey = None,
) -> JsonBytes:
    reply = await clients.forum_write.CreatePost(
        write_pb.CreatePostRequest(
            course_id=course_id,
            user_id=user.user_id,
            title=body.title,
            body=body.body,
            idempotency_key=idempotency_key,
        ),
        **clients.options,
    )
    return ok({"data": post_json(reply.post, liked_by_me=False)}, 201)


@router.get("/posts/{post_id}", summary="One post", response_model=schemas.PostResponse)
async def get_post(
    clients: RequestClients, user: CurrentUser, course_id: CourseId, post_id: RowId
) -> JsonBytes:
    reply = await clients.forum_read.GetPost(
        read_pb.GetPostRequest(course_id=course_id, post_id=post_id, user_id=user.user_id),
        **clients.options,
    )
    [post] = await _with_likes(clients, user, course_id, _posts, post_json, [reply.post])
    return ok({"data": post})


@router.delete(
    "/posts/{post_id}",
    summary="Delete your post; a teacher of the course may remove anyone's (logged)",
    response_model=schemas.DeletedResponse,
    dependencies=[FORUM_WRITE],
)
async def delete_post(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    reason: Reason = None,
) -> JsonBytes:
    await clients.forum_write.DeletePost(
        write_pb.DeletePostRequest(
            course_id=course_id, post_id=post_id, user_id=user.user_id, reason=reason
        ),
        **clients.options,
    )
    return ok(_DELETED)


@router.get(
    "/posts/{post_id}/comments",
    summary="Top-level comments of a post, oldest first",
    response_model=schemas.CommentsPage,
)
async def list_comments(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    limit: Limit = 20,
    after_id: CursorId = None,
) -> JsonBytes:
    rpc = read_pb.ListCommentsRequest(
        course_id=course_id, post_id=post_id, user_id=user.user_id, limit=limit, after_id=after_id
    )
    reply = await clients.forum_read.ListComments(rpc, **clients.options)
    return await _comments_page(clients, user, course_id, reply, limit)


@router.post(
    "/posts/{post_id}/comments",
    summary="Comment on a post, or reply to a comment with parent_id",
    response_model=schemas.CommentResponse,
    status_code=201,
    dependencies=[FORUM_WRITE],
)
async def create_comment(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    body: schemas.NewComment,
    idempotency_key: IdempotencyKey = None,
) -> JsonBytes:
    rpc = write_pb.CreateCommentRequest(
        course_id=course_id,
        post_id=post_id,
        user_id=user.user_id,
        body=body.body,
        parent_id=body.parent_id,
        idempotency_key=idempotency_key,
    )
    reply = await clients.forum_write.CreateComment(rpc, **clients.options)
    return ok({"data": comment_json(reply.comment, liked_by_me=False)}, 201)


@router.get(
    "/comments/{comment_id}",
    summary="One comment or reply (404 once it, its root or its post is deleted)",
    response_model=schemas.CommentResponse,
)
async def get_comment(
    clients: RequestClients, user: CurrentUser, course_id: CourseId, comment_id: RowId
) -> JsonBytes:
    reply = await clients.forum_read.GetComment(
        read_pb.GetCommentRequest(course_id=course_id, comment_id=comment_id, user_id=user.user_id),
        **clients.options,
    )
    [comment] = await _with_likes(
        clients, user, course_id, _comments, comment_json, [reply.comment]
    )
    return ok({"data": comment})


@router.get(
    "/comments/{comment_id}/replies",
    summary="Replies of a top-level comment, oldest first",
    response_model=schemas.CommentsPage,
)
async def list_replies(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    limit: Limit = 20,
    after_id: CursorId = None,
) -> JsonBytes:
    rpc = read_pb.ListRepliesRequest(
        course_id=course_id,
        comment_id=comment_id,
        user_id=user.user_id,
        limit=limit,
        after_id=after_id,
    )
    reply = await clients.forum_read.ListReplies(rpc, **clients.options)
    return await _comments_page(clients, user, course_id, reply, limit)


@router.delete(
    "/comments/{comment_id}",
    summary="Delete your comment or reply; a teacher of the course may remove anyone's (logged)",
    response_model=schemas.DeletedResponse,
    dependencies=[FORUM_WRITE],
)
async def delete_comment(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    reason: Reason = None,
) -> JsonBytes:
    await clients.forum_write.DeleteComment(
        write_pb.DeleteCommentRequest(
            course_id=course_id, comment_id=comment_id, user_id=user.user_id, reason=reason
        ),
        **clients.options,
    )
    return ok(_DELETED)


@router.patch(
    "/posts/{post_id}",
    summary="Edit a post's title or body: yours within the edit window; a teacher any (logged)",
    response_model=schemas.PostResponse,
    dependencies=[FORUM_WRITE],
)
async def edit_post(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    body: schemas.PostEdit,
) -> JsonBytes:
    reply = await clients.forum_write.EditPost(
        write_pb.EditPostRequest(
            course_id=course_id,
            post_id=post_id,
            user_id=user.user_id,
            title=body.title,
            body=body.body,
            reason=body.reason,
        ),
        **clients.options,
    )
    [post] = await _with_likes(clients, user, course_id, _posts, post_json, [reply.post])
    return ok({"data": post})


@router.patch(
    "/comments/{comment_id}",
    summary="Edit a comment's or reply's body, on a post's rules",
    response_model=schemas.CommentResponse,
    dependencies=[FORUM_WRITE],
)
async def edit_comment(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    body: schemas.CommentEdit,
) -> JsonBytes:
    reply = await clients.forum_write.EditComment(
        write_pb.EditCommentRequest(
            course_id=course_id,
            comment_id=comment_id,
            user_id=user.user_id,
            body=body.body,
            reason=body.reason,
        ),
        **clients.options,
    )
    [comment] = await _with_likes(
        clients, user, course_id, _comments, comment_json, [reply.comment]
    )
    return ok({"data": comment})


@router.get(
    "/posts/{post_id}/revisions",
    summary="A post's earlier texts, newest first (its author and the course's teachers)",
    response_model=schemas.RevisionsPage,
)
async def post_revisions(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    limit: Limit = 20,
    before_id: CursorId = None,
) -> JsonBytes:
    target = like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=post_id)
    return await _revisions(clients, user, course_id, target, limit, before_id)


@router.get(
    "/comments/{comment_id}/revisions",
    summary="A comment's or reply's earlier texts, newest first (its author and the teachers)",
    response_model=schemas.RevisionsPage,
)
async def comment_revisions(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    limit: Limit = 20,
    before_id: CursorId = None,
) -> JsonBytes:
    target = like_pb.Target(kind=like_pb.TARGET_KIND_COMMENT, id=comment_id)
    return await _revisions(clients, user, course_id, target, limit, before_id)


async def _revisions(
    clients: Clients,
    user: Principal,
    course_id: int,
    target: like_pb.Target,
    limit: int,
    before_id: int | None,
) -> JsonBytes:
    reply = await clients.forum_read.ListRevisions(
        read_pb.ListRevisionsRequest(
            course_id=course_id,
            user_id=user.user_id,
            target=target,
            limit=limit,
            before_id=before_id,
        ),
        **clients.options,
    )
    return page(
        [revision_json(r) for r in reply.revisions],
        limit,
        reply.has_more,
        next_before_id=optional_value(reply, "next_before_id"),
    )


@router.get(
    "/moderation",
    summary="The course's moderation log, newest first (the course's teachers only)",
    response_model=schemas.ModerationPage,
)
async def list_moderation(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    limit: Limit = 20,
    before_id: CursorId = None,
) -> JsonBytes:
    rpc = read_pb.ListModerationActionsRequest(
        course_id=course_id, user_id=user.user_id, limit=limit, before_id=before_id
    )
    reply = await clients.forum_read.ListModerationActions(rpc, **clients.options)
    return page(
        [moderation_json(a) for a in reply.actions],
        limit,
        reply.has_more,
        next_before_id=optional_value(reply, "next_before_id"),
    )


@router.get(
    "/posts/{post_id}/likes",
    summary="Who liked a post, newest first",
    response_model=schemas.LikersPage,
)
async def post_likers(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    limit: LikersLimit = 50,
    before_liked_at: TimeCursor = None,
    before_user_id: CursorId = None,
) -> JsonBytes:
    target = like_pb.Target(kind=like_pb.TARGET_KIND_POST, id=post_id)
    return await _likers(clients, user, course_id, target, limit, before_liked_at, before_user_id)


@router.get(
    "/comments/{comment_id}/likes",
    summary="Who liked a comment or a reply, newest first",
    response_model=schemas.LikersPage,
)
async def comment_likers(
    clients: RequestClients,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    limit: LikersLimit = 50,
    before_liked_at: TimeCursor = None,
    before_user_id: CursorId = None,
) -> JsonBytes:
    target = like_pb.Target(kind=like_pb.TARGET_KIND_COMMENT, id=comment_id)
    return await _likers(clients, user, course_id, target, limit, before_liked_at, before_user_id)


async def _likers(
    clients: Clients,
    user: Principal,
    course_id: int,
    target: like_pb.Target,
    limit: int,
    before_liked_at: str | None,
    before_user_id: int | None,
) -> JsonBytes:
    reply = await clients.forum_read.ListLikers(
        read_pb.ListLikersRequest(
            course_id=course_id,
            user_id=user.user_id,
            target=target,
            limit=limit,
            before_liked_at=request_time(before_liked_at, "before_liked_at"),
            before_user_id=before_user_id,
        ),
        **clients.options,
    )
    return page(
        [{"user_id": r.user_id, "liked_at": time_text(r.liked_at)} for r in reply.likers],
        limit,
        reply.has_more,
        next_before_liked_at=optional_time(reply, "next_before_liked_at"),
        next_before_user_id=optional_value(reply, "next_before_user_id"),
    )


async def _comments_page(
    clients: Clients,
    user: Principal,
    course_id: int,
    reply: read_pb.ListCommentsResponse | read_pb.ListRepliesResponse,
    limit: int,
) -> JsonBytes:
    data = await _with_likes(clients, user, course_id, _comments, comment_json, reply.comments)
    return page(data, limit, reply.has_more, next_after_id=optional_value(reply, "next_after_id"))


async def _set_like(
    clients: Clients,
    limiter: RateLimiter,
    user: Principal,
    course_id: int,
    target: Target,
    like: bool,
) -> JsonBytes:
    await limiter.enforce(user.user_id, "like toggles")
    reply = await clients.likes.SetLike(
        like_pb.SetLikeRequest(user_id=user.user_id, course_id=course_id, target=target, like=like),
        **clients.options,
    )
    return ok({"liked": reply.liked, "changed": reply.changed})


@router.post(
    "/posts/{post_id}/like",
    summary="Like or unlike a post (60 toggles a minute per user)",
    response_model=schemas.LikeResponse,
)
async def like_post(
    clients: RequestClients,
    limiter: LikeLimiter,
    user: CurrentUser,
    course_id: CourseId,
    post_id: RowId,
    body: schemas.LikeBody,
) -> JsonBytes:
    return await _set_like(clients, limiter, user, course_id, _posts([post_id])[0], body.like)


@router.post(
    "/comments/{comment_id}/like",
    summary="Like or unlike a comment or reply (60 toggles a minute per user)",
    response_model=schemas.LikeResponse,
)
async def like_comment(
    clients: RequestClients,
    limiter: LikeLimiter,
    user: CurrentUser,
    course_id: CourseId,
    comment_id: RowId,
    body: schemas.LikeBody,
) -> JsonBytes:
    return await _set_like(clients, limiter, user, course_id, _comments([comment_id])[0], body.like)
