"""Least privilege in Redis: each service's user reaches its own keys with the commands it runs,
and nothing else (the ACLs deploy/local/stack.sh writes; every service under test runs as its own
user, so the suite also proves the grants are enough). And a Redis that refuses to say how it
evicts does not stop a service that declares the policy."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
from redis.exceptions import NoPermissionError

from services.runtime import redis_client
from tests.conftest import Env
from tests.helpers import redis_server

pytestmark = pytest.mark.asyncio

Call = Callable[[redis.Redis], Awaitable[Any]]

STREAM = "agora:msg:{m0}:events"
LIKE_STREAM = "forum:{ls0}:like-events"


@pytest_asyncio.fixture
async def users(env: Env) -> AsyncIterator[dict[str, redis.Redis]]:
    clients = {
        "ingest": redis.Redis.from_url(env.redis_ingest_url),
        "likes": redis.Redis.from_url(env.redis_likes_url),
        "flusher": redis.Redis.from_url(env.redis_flusher_url),
        "gateway": redis.Redis.from_url(env.redis_gateway_url),
    }
    admin = redis.Redis.from_url(env.redis_url)
    await admin.flushdb()
    await admin.xgroup_create(STREAM, "flusher", "0", mkstream=True)
    await admin.xgroup_create(LIKE_STREAM, "flusher", "0", mkstream=True)
    yield clients
    await admin.flushdb()
    await admin.aclose()
    for client in clients.values():
        await client.aclose()


REFUSED: dict[str, list[tuple[str, Call]]] = {
    "gateway": [
        ("read a message stream", lambda r: r.xrange(STREAM)),
        ("read the backlog bound", lambda r: r.get("agora:msg:{m0}:backlog")),
        ("read a user's likes", lambda r: r.smembers("forum:{ls0}:u:7:c:42:liked")),
        ("a stream command on its own keys", lambda r: r.xadd("agora:ratelimit:x", {"a": "1"})),
    ],
    "ingest": [
        ("acknowledge", lambda r: r.xack(STREAM, "flusher", "0-1")),
        ("consume", lambda r: r.xreadgroup("flusher", "x", {STREAM: ">"}, count=1)),
        ("delete its stream", lambda r: r.delete(STREAM)),
        ("take a shard lease", lambda r: r.set("agora:msg:{m0}:lease", "me")),
        ("write a dead letter", lambda r: r.xadd("agora:msg:{m0}:dead", {"a": "1"})),
        ("reach another family's keys", lambda r: r.get("agora:prune:{prune}:due")),
        ("touch the likes", lambda r: r.xadd(LIKE_STREAM, {"a": "1"})),
        ("flush the database", lambda r: r.flushdb()),
        ("read the config", lambda r: r.config_get("requirepass")),
    ],
    "likes": [
        ("append a message", lambda r: r.xadd(STREAM, {"a": "1"})),
        ("acknowledge its own stream", lambda r: r.xack(LIKE_STREAM, "flusher", "0-1")),
        ("take a like lease", lambda r: r.set("forum:{ls0}:lease", "me")),
        ("write a like dead letter", lambda r: r.xadd("forum:{ls0}:like-events:dead", {"a": "1"})),
        ("list keys", lambda r: r.keys("*")),
    ],
    "flusher": [
        ("read the rate limits", lambda r: r.get("agora:ratelimit:like:7")),
        ("flush the database", lambda r: r.flushdb()),
        ("read the config", lambda r: r.config_get("maxmemory-policy")),
        ("read the users", lambda r: r.acl_list()),
    ],
}

ALLOWED: dict[str, list[tuple[str, Call]]] = {
    "gateway": [("count a rate limit", lambda r: r.incr("agora:ratelimit:like:7"))],
    "ingest": [
        ("append a message", lambda r: r.xadd(STREAM, {"a": "1"})),
        ("count the backlog", lambda r: r.incrby("agora:msg:{m0}:backlog", 1)),
        ("hold room", lambda r: r.hset("agora:msg:{m0}:backlog-reserved", "call", "1:1:1")),
        ("wait for a replica", lambda r: r.execute_command("WAIT", 0, 10)),
    ],
    "likes": [
        ("append a like", lambda r: r.xadd(LIKE_STREAM, {"a": "1"})),
        ("record a like", lambda r: r.sadd("forum:{ls0}:u:7:c:42:liked", "p:1")),
        ("count a like's bytes", lambda r: r.incrby("forum:{ls0}:like-events:bytes", 10)),
        ("read an access version", lambda r: r.get("forum:{c42}:access-version")),
        ("mark a post dirty", lambda r: r.sadd("forum:{dirty}:posts", "1")),
    ],
    "flusher": [
        ("consume", lambda r: r.xreadgroup("flusher", "f", {STREAM: ">"}, count=1)),
        ("acknowledge", lambda r: r.xack(STREAM, "flusher", "0-1")),
        ("acknowledge a like", lambda r: r.xack(LIKE_STREAM, "flusher", "0-1")),
        ("take a lease", lambda r: r.set("agora:msg:{m0}:lease", "f", nx=True, px=1000)),
        ("read the eviction policy", lambda r: r.info("memory")),
    ],
}


@pytest.mark.parametrize("user", sorted(REFUSED))
async def test_a_service_user_outside_its_grant_gets_noperm(
    users: dict[str, redis.Redis], user: str
) -> None:
    for name, call in REFUSED[user]:
        try:
            await call(users[user])
        except NoPermissionError:
            continue
        pytest.fail(f"{user} could {name}")
    for _, call in ALLOWED[user]:
        await call(users[user])


async def test_a_redis_that_refuses_info_is_trusted_as_declared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with redis_server("--maxmemory-policy", "allkeys-lru") as url:
        admin = redis.Redis.from_url(url)
        await admin.acl_setuser(
            "svc",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            commands=["+@all", "-info", "-config"],
        )
        await admin.aclose()
        client = redis.Redis.from_url(url.replace("redis://", "redis://svc:pw@"))
        try:
            with caplog.at_level(logging.WARNING):
                await redis_client.check_streams(client, "noeviction")
            assert "trusting REDIS_MAXMEMORY_POLICY=noeviction" in caplog.text
            with pytest.raises(redis_client.UnsafeRedis, match="declares 'allkeys-lru'"):
                await redis_client.check_streams(client, "allkeys-lru")
        finally:
            await client.aclose()
        # Where INFO answers, what the server says wins over what is declared.
        admin = redis.Redis.from_url(url)
        try:
            with pytest.raises(redis_client.UnsafeRedis, match="maxmemory-policy is 'allkeys-lru'"):
                await redis_client.check_streams(admin, "noeviction")
        finally:
            await admin.aclose()
