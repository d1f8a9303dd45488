"""A course's posts: its feed, a new post, and what a post's shared routes (resource.py) call."""

from __future__ import annotations

from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_write_service_pb2 as write_pb
from agora.forum.v1 import like_service_pb2 as like_pb
from fastapi import APIRouter

from services.gateway import schemas
from services.gateway.convert import JsonBytes, ok, optional_value, page, post_json
from services.gateway.params import CursorId, IdempotencyKey, Limit
from services.gateway.rate_limit import FORUM_WRITE
from services.gateway.routes.forum.asked import InCourse
from services.gateway.routes.forum.liked import with_likes
from services.gateway.routes.forum.resource import Listing, Resource, Rpc, Summaries

POST = Resource(
    noun="post",
    path="/posts/{post_id}",
    id_name="post_id",
    kind=like_pb.TARGET_KIND_POST,
    to_json=post_json,
    response_model=schemas.PostResponse,
    edit_body=schemas.PostEdit,
    summaries=Summaries(
        get="One post",
        delete="Delete your post; a teacher of the course may remove anyone's (logged)",
        edit="Edit a post's title or body: yours within the edit window; a teacher any (logged)",
        revisions="A post's earlier texts, newest first (its author and the course's teachers)",
        likers="Who liked a post, newest first",
        like="Like or unlike a post (60 toggles a minute per user)",
    ),
    get=Rpc(lambda c: c.forum_read.GetPost, read_pb.GetPostRequest),
    delete=Rpc(lambda c: c.forum_write.DeletePost, write_pb.DeletePostRequest),
    edit=Rpc(lambda c: c.forum_write.EditPost, write_pb.EditPostRequest),
    row=lambda reply: reply.post,
    below=Listing(
        "/comments",
        name="list_comments",
        summary="Top-level comments of a post, oldest first",
        rpc=Rpc(lambda c: c.forum_read.ListComments, read_pb.ListCommentsRequest),
    ),
)


async def list_posts(at: InCourse, limit: Limit = 20, before_id: CursorId = None) -> JsonBytes:
    rpc = read_pb.ListPostsRequest(
        course_id=at.course_id, user_id=at.user.user_id, limit=limit, before_id=before_id
    )
    reply = await at.clients.forum_read.ListPosts(rpc, **at.clients.options)
    data = await with_likes(at, POST.kind, post_json, reply.posts)
    return page(data, limit, reply.has_more, next_before_id=optional_value(reply, "next_before_id"))


async def create_post(
    at: InCourse, body: schemas.NewPost, idempotency_key: IdempotencyKey = None
) -> JsonBytes:
    rpc = write_pb.CreatePostRequest(
        course_id=at.course_id,
        user_id=at.user.user_id,
        title=body.title,
        body=body.body,
        idempotency_key=idempotency_key,
    )
    reply = await at.clients.forum_write.CreatePost(rpc, **at.clients.options)
    return ok({"data": post_json(reply.post, liked_by_me=False)}, 201)


def add_routes(router: APIRouter) -> None:
    """The course feed, and a new post in it."""
    router.add_api_route(
        "/posts",
        list_posts,
        methods=["GET"],
        summary="The course feed, newest first",
        response_model=schemas.PostsPage,
    )
    router.add_api_route(
        "/posts",
        create_post,
        methods=["POST"],
        summary="Create a post",
        response_model=schemas.PostResponse,
        status_code=201,
        dependencies=[FORUM_WRITE],
    )
