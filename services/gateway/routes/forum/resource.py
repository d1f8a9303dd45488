"""A post and a comment as their routes address them, and the routes both have, each declared
once for either: read one, delete it, edit it, and list the comments under it (a post's
top-level comments, a comment's replies). posts.POST and comments.COMMENT say how the two differ.
"""

# No `from __future__ import annotations`: FastAPI reads a route's parameters from its function's
# annotations, and those below name the resource's own path parameter and body, which exist only
# once the resource's routes are added.

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Generic, TypeVar

from agora.forum.v1 import forum_pb2
from agora.forum.v1 import like_service_pb2 as like_pb
from fastapi import APIRouter, Depends, Path
from google.protobuf.message import Message
from pydantic import BaseModel

from services.domain.ids import MAX_ROW_ID
from services.gateway import schemas
from services.gateway.auth import CurrentUser
from services.gateway.clients import Clients, RequestClients
from services.gateway.convert import JsonBytes, comment_json, ok, optional_value, page
from services.gateway.params import CourseId, CursorId, Limit, Reason
from services.gateway.rate_limit import FORUM_WRITE
from services.gateway.routes.forum.asked import Asked
from services.gateway.routes.forum.liked import with_likes

Row = TypeVar("Row", forum_pb2.Post, forum_pb2.Comment)
Endpoint = TypeVar("Endpoint", bound=Callable[..., Awaitable[JsonBytes]])
Edit = TypeVar("Edit", schemas.PostEdit, schemas.CommentEdit)

_DELETED = {"data": {"deleted": True}}


@dataclass(frozen=True)
class AskedOf(Asked):
    """About the post or comment `target_id` of the course."""

    target_id: int


@dataclass(frozen=True)
class Rpc:
    """A call whose request is a post's or a comment's own: the stub's method (on the request's
    clients) and the request's type."""

    method: Callable[[Clients], Callable[..., Awaitable[Any]]]
    request: Callable[..., Message]

    async def __call__(self, clients: Clients, **fields: Any) -> Any:
        return await self.method(clients)(self.request(**fields), **clients.options)


@dataclass(frozen=True)
class Summaries:
    """What the document says each route a post and a comment both have does, for this one."""

    get: str
    delete: str
    edit: str
    revisions: str
    likers: str
    like: str


@dataclass(frozen=True)
class Listing:
    """The comments listed under a post (its top-level ones) or a comment (its replies)."""

    path: str
    name: str
    summary: str
    rpc: Rpc


@dataclass(frozen=True)
class Resource(Generic[Row, Edit]):
    """How the routes of a post and of a comment differ."""

    # "post": its routes are named after it (get_post, post_revisions, like_post).
    noun: str
    # Its path below the course, and the path parameter that names it there (also the field of
    # its requests that does).
    path: str
    id_name: str
    kind: like_pb.TargetKind
    to_json: Callable[[Row, bool | None], dict[str, Any]]
    response_model: type[BaseModel]
    # Its edit's fields are those of its edit request.
    edit_body: type[Edit]
    summaries: Summaries
    get: Rpc
    delete: Rpc
    edit: Rpc
    # The row in a reply of `get` or `edit`.
    row: Callable[[Any], Row]
    below: Listing

    @cached_property
    def asked(self) -> Callable[..., Awaitable[AskedOf]]:
        """The dependency that reads a request about one of these (the path's id: params.RowId,
        under this resource's name for it)."""
        TargetId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, alias=self.id_name)]  # noqa: N806

        async def asked(
            clients: RequestClients, user: CurrentUser, course_id: CourseId, target_id: TargetId
        ) -> AskedOf:
            return AskedOf(clients, user, course_id, target_id)

        return asked

    def ids(self, asked: AskedOf) -> dict[str, int]:
        """The fields that say, in any of its requests, which one and for whom."""
        return {
            "course_id": asked.course_id,
            self.id_name: asked.target_id,
            "user_id": asked.user.user_id,
        }

    def target(self, target_id: int) -> like_pb.Target:
        return like_pb.Target(kind=self.kind, id=target_id)

    def route(
        self,
        router: APIRouter,
        method: str,
        suffix: str,
        name: str,
        summary: str,
        model: type[BaseModel],
        **options: Any,
    ) -> Callable[[Endpoint], Endpoint]:
        """The decorator that adds a route of one of these to `router`: `method` at its path
        and `suffix`, named `name` (its noun in place of {noun})."""
        return router.api_route(
            self.path + suffix,
            methods=[method],
            name=name.format(noun=self.noun),
            summary=summary,
            response_model=model,
            **options,
        )

    async def one(self, asked: AskedOf, reply: Any) -> JsonBytes:
        """The row of `reply` as the answer, with whether the user likes it."""
        rows = [self.row(reply)]
        [data] = await with_likes(asked, self.kind, self.to_json, rows)
        return ok({"data": data})


def add_routes(router: APIRouter, resource: Resource[Row, Edit]) -> None:
    """Read it, delete it, edit it, and the comments under it."""
    At = Annotated[AskedOf, Depends(resource.asked)]  # noqa: N806 (a type, named as one)
    route, said, below = resource.route, resource.summaries, resource.below
    model = resource.response_model
    write = [FORUM_WRITE]

    @route(router, "GET", "", "get_{noun}", said.get, model)
    async def get(at: At) -> JsonBytes:
        return await resource.one(at, await resource.get(at.clients, **resource.ids(at)))

    @route(
        router,
        "DELETE",
        "",
        "delete_{noun}",
        said.delete,
        schemas.DeletedResponse,
        dependencies=write,
    )
    async def delete(at: At, reason: Reason = None) -> JsonBytes:
        await resource.delete(at.clients, **resource.ids(at), reason=reason)
        return ok(_DELETED)

    @route(router, "PATCH", "", "edit_{noun}", said.edit, model, dependencies=write)
    async def edit(
        at: At,
        # FastAPI takes the body's model from here; to mypy it is a value, not a type.
        body: resource.edit_body,  # type: ignore[name-defined]
    ) -> JsonBytes:
        edited = await resource.edit(at.clients, **resource.ids(at), **body.model_dump())
        return await resource.one(at, edited)

    @route(router, "GET", below.path, below.name, below.summary, schemas.CommentsPage)
    async def listing(at: At, limit: Limit = 20, after_id: CursorId = None) -> JsonBytes:
        reply = await below.rpc(at.clients, **resource.ids(at), limit=limit, after_id=after_id)
        kind = like_pb.TARGET_KIND_COMMENT
        data = await with_likes(at, kind, comment_json, reply.comments)
        cursor = optional_value(reply, "next_after_id")
        return page(data, limit, reply.has_more, next_after_id=cursor)
