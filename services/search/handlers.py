"""The SearchService RPC surface (hosted by timeline): a query parsed once, the tenant's ranked
page from the index, each hit read back from its own table and matched again there — what no
longer matches (pruned with the archive off, deleted, edited since) is left out — and cut into a
highlighted snippet. The requests' fields are checked before, by services/domain/field_rules.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
import grpc
from agora.forum.v1 import forum_pb2
from agora.messaging.v1 import message_pb2
from agora.search.v1 import search_service_pb2 as pb
from agora.search.v1 import search_service_pb2_grpc as pb_grpc

from services.domain.forum import NOT_ENROLLED, comment_fields, post_fields
from services.domain.messaging import (
    agent_user_pairs,
    agent_users,
    agent_users_query,
    stored_message_fields,
)
from services.domain.people import PeopleDirectory, put_names
from services.domain.search_text import DEFAULT_PAGE, Found, Query, match, snippet
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.runtime.mysql import MysqlDatabase
from services.search.repository import ForumSource, Keyset, MessageSource, SearchIndex
from services.search.terms import account_tenant, course_tenant, tsqueries

# A page whose hits were mostly dropped (pruned, deleted) reads on, this many times at most.
_READS_PER_PAGE = 4
_CONTENT = 10  # MESSAGE_COLUMNS' content
# A confirmed hit: (message row, archived, found, kind); (post, comment or None, found, text, kind).
_MessageHit = tuple[Any, bool, Found, int]
_CourseHit = tuple[Any, Any, Found, str, int]
H = TypeVar("H")


class CursorError(ValueError):
    pass


def _scope_key(scope: str, query: Query) -> str:
    return hashlib.blake2b(f"{scope}\x00{query.key()}".encode(), digest_size=8).hexdigest()


def encode_cursor(scope: str, query: Query, at: Keyset) -> str:
    """An opaque cursor: the end of a page, bound to its query and scope."""
    body = {
        "s": _scope_key(scope, query),
        "k": at.kind,
        "t": int(at.at.timestamp() * 1_000_000),
        "i": list(at.ids),
    }
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()


def decode_cursor(cursor: str, scope: str, query: Query, n_ids: int) -> Keyset:
    if not cursor:
        return Keyset.start(n_ids)
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        kind, micros, ids = int(body["k"]), int(body["t"]), [int(i) for i in body["i"]]
        scope_key = str(body["s"])
        at = datetime.fromtimestamp(micros / 1_000_000, UTC)
    except (ValueError, KeyError, TypeError, OverflowError, UnicodeError) as exc:
        raise CursorError("is not a cursor of a search page") from exc
    if scope_key != _scope_key(scope, query):
        raise CursorError("belongs to another query or scope: start again without it")
    if not 1 <= kind <= 4 or len(ids) != n_ids:
        raise CursorError("is not a cursor of a search page")
    return Keyset(kind, at, tuple(ids))


def match_fields(found: Found, text: str, kind: int) -> pb.Match:
    cut = snippet(text, found.spans)
    return pb.Match(
        kind=pb.MatchKind.Name(kind),
        fragments=[pb.Fragment(text=t, highlighted=h) for t, h in cut.fragments],
        cut_before=cut.cut_before,
        cut_after=cut.cut_after,
    )


class SearchHandlers(pb_grpc.SearchServiceServicer):
    def __init__(
        self,
        index: SearchIndex,
        messages: MessageSource,
        mysql: MysqlDatabase,
        forum: ForumSource,
        people: PeopleDirectory,
    ) -> None:
        self._index = index
        self._messages = messages
        self._mysql = mysql
        self._forum = forum
        self._people = people

    async def SearchMessages(
        self, request: pb.SearchMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchMessagesResponse:
        query = Query.parse(request.query)
        scope = f"a{request.account_id}/{request.conversation_key}"
        after = await _keyset(context, request.cursor, scope, query, 1)
        limit = request.limit or DEFAULT_PAGE
        q = tsqueries(account_tenant(request.account_id), query)
        account, key = request.account_id, request.conversation_key

        async def confirmed(page: Sequence[asyncpg.Record]) -> list[_MessageHit]:
            stored = await self._messages.messages(account, [r["msg_id"] for r in page])
            hits = []
            for r in page:
                row, archived = stored.get(r["msg_id"], (None, False))
                found = match(query, row[_CONTENT] or "") if row is not None else None
                if found is not None:
                    hits.append((row, archived, found, r["kind"]))
            return hits

        hits, after, more = await _ranked_page(
            lambda at, n: self._index.search_messages(account, key, q, at, n),
            confirmed,
            lambda r: Keyset(r["kind"], r["sent_at"], (r["message_id"],)),
            after,
            limit,
        )
        messages = await self._with_agents([row for row, *_ in hits])
        response = pb.SearchMessagesResponse(
            hits=[
                pb.MessageHit(
                    message=message,
                    archived=archived,
                    match=match_fields(found, row[_CONTENT] or "", kind),
                )
                for message, (row, archived, found, kind) in zip(messages, hits, strict=True)
            ]
        )
        if more:
            response.next_cursor = encode_cursor(scope, query, after)
        return response

    async def _with_agents(self, rows: Sequence[Any]) -> list[message_pb2.StoredMessage]:
        """The rows as stored messages, with their agents and the agents' names: one query and
        one directory lookup for the page."""
        agents: dict[Any, Any] = {}
        pairs = agent_user_pairs(rows)
        if pairs:
            sql, args = agent_users_query(pairs)
            agents = agent_users(await self._mysql.fetchall(sql, args))
        fields = [stored_message_fields(row, agents) for row in rows]
        names = await self._people.names_if_up(f.get("agent_user_id") for f in fields)
        put_names(fields, names, (("agent_user_id", "agent_name"),))
        return [message_pb2.StoredMessage(**f) for f in fields]

    async def SearchCourse(
        self, request: pb.SearchCourseRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchCourseResponse:
        query = Query.parse(request.query)
        scope = f"c{request.course_id}"
        after = await _keyset(context, request.cursor, scope, query, 2)
        if not await self._forum.is_member(request.course_id, request.user_id):
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
        limit = request.limit or DEFAULT_PAGE
        q = tsqueries(course_tenant(request.course_id), query)

        async def confirmed(page: Sequence[asyncpg.Record]) -> list[_CourseHit]:
            posts = await self._forum.posts(list({r["post_id"] for r in page}))
            comments = await self._forum.comments(
                [r["comment_id"] for r in page if r["comment_id"]]
            )
            hits = []
            for r in page:
                post = posts.get(r["post_id"])
                comment = comments.get(r["comment_id"]) if r["comment_id"] else None
                if post is None or (r["comment_id"] and comment is None):
                    continue  # deleted, or its post is
                text = _text_of(post, comment)
                found = match(query, text)
                if found is not None:
                    hits.append((post, comment, found, text, r["kind"]))
            return hits

        hits, after, more = await _ranked_page(
            lambda at, n: self._index.search_course(request.course_id, q, at, n),
            confirmed,
            lambda r: Keyset(r["kind"], r["created_at"], (r["post_id"], r["comment_id"])),
            after,
            limit,
        )
        authors = await self._people.names_if_up(
            [p["user_id"] for p, *_ in hits] + [c["user_id"] for _, c, *_ in hits if c is not None]
        )
        response = pb.SearchCourseResponse()
        for post, comment, found, text, kind in hits:
            post_pb = _named(forum_pb2.Post(**post_fields(post)), authors)
            hit = pb.CourseHit(match=match_fields(found, text, kind))
            if comment is None:
                hit.post.CopyFrom(post_pb)
            else:
                hit.comment.CopyFrom(_named(forum_pb2.Comment(**comment_fields(comment)), authors))
                hit.comment_post.CopyFrom(post_pb)
            response.hits.append(hit)
        if more:
            response.next_cursor = encode_cursor(scope, query, after)
        return response


async def _ranked_page(
    read: Callable[[Keyset, int], Awaitable[list[asyncpg.Record]]],
    confirmed: Callable[[Sequence[asyncpg.Record]], Awaitable[list[H]]],
    keyset_of: Callable[[asyncpg.Record], Keyset],
    after: Keyset,
    limit: int,
) -> tuple[list[H], Keyset, bool]:
    """Up to `limit` hits, in the index's order from `after`, each one its table confirms (what
    was pruned, deleted or edited since it was indexed is dropped). Each read asks for one row
    past what is missing, which says whether there is more; a page of stale rows reads on, at
    most _READS_PER_PAGE times: then the page is short and its cursor goes on from the last row
    read. Returns the hits, that cursor, and whether there is more."""
    hits: list[H] = []
    more = False
    for _ in range(_READS_PER_PAGE):
        wanted = limit - len(hits)
        rows = await read(after, wanted + 1)
        more = len(rows) > wanted
        page = rows[:wanted]
        hits += await confirmed(page)
        if page:
            after = keyset_of(page[-1])
        if not more or len(hits) >= limit:
            break
    return hits, after, more


def _text_of(post: Any, comment: Any) -> str:
    """What a hit's snippet is cut from: a comment's body, or a post's title then body."""
    return str(comment["body"]) if comment is not None else f"{post['title']}\n{post['body']}"


def _named(item: Any, names: dict[int, str]) -> Any:
    if item.user_id in names:
        item.author_name = names[item.user_id]
    return item


async def _keyset(
    context: grpc.aio.ServicerContext, cursor: str, scope: str, query: Query, n_ids: int
) -> Keyset:
    try:
        return decode_cursor(cursor, scope, query, n_ids)
    except CursorError as exc:
        await abort_invalid(context, [FieldViolation("cursor", str(exc))])
