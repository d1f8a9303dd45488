"""A user's own courses: GET /api/courses and ForumReadService.ListCourses, against real
PostgreSQL — every membership once, in course order, with its role and the course's title, and
nobody else's."""

from __future__ import annotations

from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from agora.forum.v1 import forum_pb2, forum_read_service_pb2_grpc
from agora.forum.v1 import forum_read_service_pb2 as read_pb

from services.runtime.grpc_errors import field_violations
from tests.helpers import as_user, mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio
USER = 770_001
OTHER = 770_002


async def enrol(pg: asyncpg.Pool) -> dict[int, str]:
    """USER in 12 courses (every third as teacher), OTHER alone in one more; the courses' roles."""
    roles = {8000 + i: "teacher" if i % 3 == 0 else "student" for i in range(12)}
    await pg.executemany(
        "INSERT INTO courses (id, title) VALUES ($1, $2)",
        [(c, f"Khoá học {c} 📚") for c in [*roles, 9000]],
    )
    await pg.executemany(
        "INSERT INTO course_members (course_id, user_id, role) VALUES ($1, $2, $3)",
        [(c, USER, role) for c, role in roles.items()] + [(9000, OTHER, "student")],
    )
    return roles


async def test_every_course_once_in_order_with_its_role_and_title(
    gateway: httpx.AsyncClient, env: Env, pg_admin: asyncpg.Pool, clean: None
) -> None:
    roles = await enrol(pg_admin)
    seen: list[dict[str, Any]] = []
    params: dict[str, int] = {"limit": 5}
    for _ in range(10):
        answer = await gateway.get("/api/courses", params=params, headers=as_user(env, USER))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        seen += body["data"]
        assert len(body["data"]) <= 5
        if not body["pagination"]["has_more"]:
            # As for comments (an ascending list), the last page's cursor is where a later read
            # goes on from.
            assert body["pagination"]["next_after_id"] == max(roles)
            break
        params = {"limit": 5, "after_id": body["pagination"]["next_after_id"]}
    assert [c["course_id"] for c in seen] == sorted(roles)
    assert {c["course_id"]: c["role"] for c in seen} == roles
    assert all(c["title"] == f"Khoá học {c['course_id']} 📚" for c in seen)
    assert all(c["joined_at"].endswith("+00:00") for c in seen)
    # The demo teacher (user 1) teaches 42 and 99; a user in no course gets an empty page.
    teacher = (await gateway.get("/api/courses", headers=as_user(env, 1))).json()
    assert [(c["course_id"], c["role"]) for c in teacher["data"]] == [
        (42, "teacher"),
        (99, "teacher"),
    ]
    nobody = (await gateway.get("/api/courses", headers=as_user(env, 770_999))).json()
    assert nobody["data"] == []
    assert nobody["pagination"] == {"limit": 20, "has_more": False, "next_after_id": None}


async def test_refusals_say_what_is_wrong(gateway: httpx.AsyncClient, env: Env) -> None:
    assert (await gateway.get("/api/courses")).status_code == 401
    bad = (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"after_id": 0}, "after_id"))
    for params, field in bad:
        refused = await gateway.get("/api/courses", params=params, headers=as_user(env, USER))
        assert refused.status_code == 422, refused.text
        assert [f["field"] for f in refused.json()["error"]["fields"]] == [field]


async def test_the_rpc_lists_only_the_token_s_own_courses(
    forum_reads: forum_read_service_pb2_grpc.ForumReadServiceStub,
    env: Env,
    pg_admin: asyncpg.Pool,
    clean: None,
) -> None:
    roles = await enrol(pg_admin)
    page = await forum_reads.ListCourses(read_pb.ListCoursesRequest(user_id=USER, limit=100))
    assert [(c.course_id, c.role) for c in page.courses] == [
        (
            c,
            forum_pb2.COURSE_ROLE_TEACHER if role == "teacher" else forum_pb2.COURSE_ROLE_STUDENT,
        )
        for c, role in sorted(roles.items())
    ]
    assert not page.has_more
    # Asking for someone else's courses with your own token is refused before any query.
    token = mint_token(env.jwt_secret, sub=OTHER, accounts=[])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await forum_reads.ListCourses(
            read_pb.ListCoursesRequest(user_id=USER, limit=10),
            metadata=(("authorization", f"Bearer {token}"),),
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await forum_reads.ListCourses(read_pb.ListCoursesRequest(user_id=USER, limit=0))
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in field_violations(invalid.value)] == ["limit"]
