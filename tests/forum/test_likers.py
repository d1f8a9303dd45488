"""Who liked a post or a comment: GET …/posts/{id}/likes, …/comments/{id}/likes and
ForumReadService.ListLikers, against real PostgreSQL — newest first, every liker once across
pages, for the course's members only."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_read_service_pb2 as read_pb
from agora.forum.v1 import forum_read_service_pb2_grpc
from agora.forum.v1 import like_service_pb2 as like_pb

from services.runtime.grpc_errors import field_violations
from services.timeline import forum_repository as q
from tests.forum.support import plan_nodes, walk
from tests.helpers import as_user
from tests.stack import Env

pytestmark = pytest.mark.asyncio
COURSE = "/api/courses/42"
# A likers page's cursor: the last liker's like time, then its user id.
LIKERS = ("before_liked_at", "before_user_id")
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


async def liked_by(pg: asyncpg.Pool, table: str, target: int, users: range) -> list[int]:
    """`users` like `target`, one a minute, every third pair at the same instant (the user id
    breaks the tie); the user ids newest first, as the list must show them."""
    column = "post_id" if table == "post_likes" else "comment_id"
    rows = [(target, u, T0 + timedelta(minutes=(u - users.start) // 3 * 3)) for u in users]
    await pg.executemany(
        f"INSERT INTO {table} ({column}, user_id, created_at) VALUES ($1, $2, $3)",
        rows,
    )
    return [u for _, u, _ in sorted(rows, key=lambda r: (r[2], r[1]), reverse=True)]


async def test_likers_newest_first_each_once_across_pages(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    post_order = await liked_by(pg_admin, "post_likes", 1, range(1000, 1040))
    comment_order = await liked_by(pg_admin, "comment_likes", 2, range(2000, 2010))
    member = as_user(env, 7)
    posts = await walk(gateway, f"{COURSE}/posts/1/likes", member, *LIKERS, pages=50, sized=True)
    # The lab's own like of post 2 (by user 7) is not post 1's.
    assert [x["user_id"] for x in posts] == post_order
    assert posts[0]["liked_at"] == "2026-11-02T09:39:00.000+00:00"
    comments = await walk(
        gateway, f"{COURSE}/comments/2/likes", member, *LIKERS, pages=50, sized=True
    )
    assert [x["user_id"] for x in comments] == comment_order
    # Either half of the cursor alone, as the timeline's: before an instant, or before one
    # user's like (of the likes at the same instant, those of greater user ids are newer).
    before_time = await gateway.get(
        f"{COURSE}/posts/1/likes",
        params={"before_liked_at": "2026-11-02T09:30:00.000+00:00", "limit": 200},
        headers=member,
    )
    # Users 1030-1032 liked at 09:30 (one minute each, by threes), 1033 on after it.
    assert [x["user_id"] for x in before_time.json()["data"]] == [u for u in post_order if u < 1030]
    before_user = await gateway.get(
        f"{COURSE}/posts/1/likes", params={"before_user_id": 1031, "limit": 200}, headers=member
    )
    assert [x["user_id"] for x in before_user.json()["data"]] == post_order[
        post_order.index(1031) + 1 :
    ]
    never_liked = await gateway.get(
        f"{COURSE}/posts/1/likes", params={"before_user_id": 5}, headers=member
    )
    assert never_liked.json()["data"] == []
    nobody = (await gateway.get(f"{COURSE}/comments/1/likes", headers=member)).json()
    assert nobody["data"] == []
    assert nobody["pagination"] == {
        "limit": 50,
        "has_more": False,
        "next_before_liked_at": None,
        "next_before_user_id": None,
    }


async def test_only_members_see_likers_of_live_targets_of_the_course(
    gateway: httpx.AsyncClient, env: Env, clean: None
) -> None:
    member = as_user(env, 7)
    assert (await gateway.get(f"{COURSE}/posts/2/likes")).status_code == 401
    stranger = await gateway.get(f"{COURSE}/posts/2/likes", headers=as_user(env, 50))
    assert stranger.status_code == 403
    # Post 3 is course 99's; comment 999 does not exist.
    assert (await gateway.get(f"{COURSE}/posts/3/likes", headers=member)).status_code == 404
    assert (await gateway.get(f"{COURSE}/comments/999/likes", headers=member)).status_code == 404
    deleted = await gateway.delete(f"{COURSE}/comments/1", headers=as_user(env, 8))
    assert deleted.status_code == 200
    assert (await gateway.get(f"{COURSE}/comments/1/likes", headers=member)).status_code == 404
    liked = (await gateway.get(f"{COURSE}/posts/2/likes", headers=member)).json()
    assert [x["user_id"] for x in liked["data"]] == [7]
    bad: tuple[tuple[dict[str, str | int], str], ...] = (
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"before_user_id": 0}, "before_user_id"),
        ({"before_liked_at": "yesterday", "before_user_id": 5}, "before_liked_at"),
    )
    for params, field in bad:
        refused = await gateway.get(f"{COURSE}/posts/2/likes", params=params, headers=member)
        assert refused.status_code == 422, (params, refused.text)
        assert field in [f["field"] for f in refused.json()["error"]["fields"]], refused.text


async def test_the_rpc_refuses_a_target_that_is_not_one(
    forum_reads: forum_read_service_pb2_grpc.ForumReadServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await forum_reads.ListLikers(
            read_pb.ListLikersRequest(
                course_id=42, user_id=7, limit=10, target=like_pb.Target(id=1)
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(refused.value)] == ["target.kind"]


async def test_a_page_of_a_hot_post_s_likers_reads_its_index_and_sorts_nothing(
    pg_admin: asyncpg.Pool, pg_timeline: asyncpg.Pool, clean: None
) -> None:
    await pg_admin.execute(
        "INSERT INTO post_likes (post_id, user_id, created_at)"
        " SELECT 1, u, $1::timestamptz + u * interval '1 second'"
        " FROM generate_series(100000, 120000) u",
        T0,
    )
    await pg_admin.execute("ANALYZE post_likes")
    middle = T0 + timedelta(seconds=110_000)
    async with pg_timeline.acquire() as conn:
        for cursor in ((None, None), (middle, 110_000)):
            reply = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q.POST_LIKERS_CHECKED,
                1,
                *cursor,
                51,
                42,
                7,
            )
            plan = json.loads(reply)[0]["Plan"]
            nodes = plan_nodes(plan)
            scans = [n for n in nodes if n.get("Index Name") == "post_likes_newest"]
            assert [n["Node Type"] for n in scans] in (["Index Scan"], ["Index Only Scan"]), plan
            assert scans[0]["Actual Rows"] <= 51, plan
            # The only sort is the checks' row joined to the page: never the 20,001 likes.
            assert all(n.get("Actual Rows", 0) <= 52 for n in nodes if n["Node Type"] == "Sort")
            buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
            assert buffers <= 40, buffers
