"""Full-text search in Vietnamese (docs/search.md): an account's messages, a course's posts and
comments, served by timeline's SearchService. A query finds its words with or without their
marks; a result opens in context (a message: the messages route with `around`).

The account route needs a token that grants the account, as every inbox route; the course
route acts for the token's subject, whose enrolment the service checks (403), as the forum's
reads do.
"""

from __future__ import annotations

from typing import Annotated, Any

import grpc
from agora.forum.v1 import like_service_pb2 as like_pb
from agora.search.v1 import search_service_pb2 as search_pb
from fastapi import APIRouter, Query

from services.domain.ids import ID_PATTERN
from services.gateway import schemas
from services.gateway.auth import CurrentUser, require_account
from services.gateway.clients import RequestClients
from services.gateway.convert import (
    JsonBytes,
    comment_json,
    match_json,
    message_hit_json,
    ok,
    post_json,
)
from services.gateway.errors import ApiError
from services.gateway.params import AccountId
from services.gateway.routes.forum.asked import InCourse
from services.gateway.routes.forum.liked import liked_by_me_or_unknown

router = APIRouter(tags=["search"])

# The search service's bounds (services/search/text.py): what a person types in a search box.
MAX_QUERY = 200
MAX_SEARCH_LIMIT = 50
# A cursor is the service's own text; this only bounds what is passed on.
MAX_CURSOR = 1024

SearchQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_QUERY,
        description="What the person typed: every word must occur, with or without its marks "
        '("xit chong nang" finds "xịt chống nắng"). 422 when it is blank, holds control '
        "characters or has no letter or digit",
    ),
]
SearchLimit = Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT, description="Hits per page")]
SearchCursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR,
        description="next_cursor of the previous page, with the same q (and scope); 422 for "
        "another query's or a malformed one",
    ),
]
# The request fields SearchService names in its field violations, as this route's parameters.
_PARAMETERS = {"query": "q"}


async def _searched(call: Any, request: Any, options: dict[str, Any]) -> Any:
    try:
        return await call(request, **options)
    except grpc.aio.AioRpcError as exc:
        raise ApiError.from_grpc(exc, _PARAMETERS) from exc


@router.get(
    "/api/zalo-accounts/{account_id}/search",
    summary="Search the account's messages, live and archived (Vietnamese, with or without marks)",
    response_model=schemas.MessageSearchPage,
)
async def search_messages(
    clients: RequestClients,
    user: CurrentUser,
    account_id: AccountId,
    q: SearchQuery,
    conversation_key: Annotated[
        str | None,
        Query(pattern=ID_PATTERN, description="Only this conversation (its Zalo thread id)"),
    ] = None,
    limit: SearchLimit = 20,
    cursor: SearchCursor = None,
) -> JsonBytes:
    require_account(user, account_id)
    rpc = search_pb.SearchMessagesRequest(
        account_id=account_id,
        query=q,
        conversation_key=conversation_key or "",
        limit=limit,
        cursor=cursor or "",
    )
    reply = await _searched(clients.search.SearchMessages, rpc, clients.options)
    return ok(
        {
            "hits": [message_hit_json(hit) for hit in reply.hits],
            "next_cursor": reply.next_cursor or None,
        }
    )


@router.get(
    "/api/courses/{course_id}/search",
    summary="Search the course's posts and comments (Vietnamese, with or without marks)",
    response_model=schemas.CourseSearchPage,
)
async def search_course(
    at: InCourse, q: SearchQuery, limit: SearchLimit = 20, cursor: SearchCursor = None
) -> JsonBytes:
    rpc = search_pb.SearchCourseRequest(
        course_id=at.course_id,
        user_id=at.user.user_id,
        query=q,
        limit=limit,
        cursor=cursor or "",
    )
    reply = await _searched(at.clients.search.SearchCourse, rpc, at.clients.options)
    # Whether the caller likes each post and comment shown: one LikedMap call for the page.
    posts = [hit.comment_post if hit.HasField("comment") else hit.post for hit in reply.hits]
    comments = [hit.comment for hit in reply.hits if hit.HasField("comment")]
    targets = [{"kind": like_pb.TARGET_KIND_POST, "id": p.id} for p in posts]
    targets += [{"kind": like_pb.TARGET_KIND_COMMENT, "id": c.id} for c in comments]
    liked = iter(await liked_by_me_or_unknown(at.clients, at.user, at.course_id, targets))
    post_liked = [next(liked) for _ in posts]
    hits = []
    for hit, post, post_flag in zip(reply.hits, posts, post_liked, strict=True):
        is_comment = hit.HasField("comment")
        hits.append(
            {
                "type": "comment" if is_comment else "post",
                "post": post_json(post, post_flag),
                "comment": comment_json(hit.comment, next(liked)) if is_comment else None,
                "match": match_json(hit.match),
            }
        )
    return ok({"hits": hits, "next_cursor": reply.next_cursor or None})
