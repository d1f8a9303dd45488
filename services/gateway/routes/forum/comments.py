"""A post's comments and their replies: a new one, and what a comment's shared routes
(resource.py) call."""

from __future__ import annotations

from typing import Annotated

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from fastapi import APIRouter, Depends

from services.gateway import schemas
from services.gateway.convert import JsonBytes, comment_json, ok
from services.gateway.params import IdempotencyKey
from services.gateway.rate_limit import FORUM_WRITE
from services.gateway.routes.forum.posts import POST
from services.gateway.routes.forum.resource import AskedOf, Listing, Resource, Rpc, Summaries

# A new comment's post, from the path as a post's own routes read it.
OnPost = Annotated[AskedOf, Depends(POST.asked)]

COMMENT = Resource(
    noun="comment",
    path="/comments/{comment_id}",
    id_name="comment_id",
    kind=like_pb.TARGET_KIND_COMMENT,
    to_json=comment_json,
    response_model=schemas.CommentResponse,
    edit_body=schemas.CommentEdit,
    summaries=Summaries(
        get="One comment or reply (404 once it, its root or its post is deleted)",
        delete="Delete your comment or reply; a teacher of the course may remove anyone's (logged)",
        edit="Edit a comment's or reply's body, on a post's rules",
        revisions="A comment's or reply's earlier texts, newest first (its author and the "
        "teachers)",
        likers="Who liked a comment or a reply, newest first",
        like="Like or unlike a comment or reply (60 toggles a minute per user)",
    ),
    get=Rpc(lambda c: c.forum_read.GetComment, read_pb.GetCommentRequest),
    delete=Rpc(lambda c: c.forum_write.DeleteComment, write_pb.DeleteCommentRequest),
    edit=Rpc(lambda c: c.forum_write.EditComment, write_pb.EditCommentRequest),
    row=lambda reply: reply.comment,
    below=Listing(
        "/replies",
        name="list_replies",
        summary="Replies of a top-level comment, oldest first",
        rpc=Rpc(lambda c: c.forum_read.ListReplies, read_pb.ListRepliesRequest),
    ),
)


async def create_comment(
    at: OnPost, body: schemas.NewComment, idempotency_key: IdempotencyKey = None
) -> JsonBytes:
    rpc = write_pb.CreateCommentRequest(
        course_id=at.course_id,
        post_id=at.target_id,
        user_id=at.user.user_id,
        body=body.body,
        parent_id=body.parent_id,
        idempotency_key=idempotency_key,
    )
    reply = await at.clients.forum_write.CreateComment(rpc, **at.clients.options)
    return ok({"data": comment_json(reply.comment, liked_by_me=False)}, 201)


def add_routes(router: APIRouter) -> None:
    """A new comment on a post, or a reply to one of its comments."""
    router.add_api_route(
        "/posts/{post_id}/comments",
        create_comment,
        methods=["POST"],
        summary="Comment on a post, or reply to a comment with parent_id",
        response_model=schemas.CommentResponse,
        status_code=201,
        dependencies=[FORUM_WRITE],
    )
