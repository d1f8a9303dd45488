"""Least privilege in Redis: each service's user runs the commands its code and scripts run, each
on its own key family only (both derived from services/keyspace: every grant is tried, and every
command some service holds is tried on every family the user does not hold it on), and nothing
that erases, cuts, renames, expires or overwrites a stream or a backlog counter — directly or
from a script, which Redis checks command by command against the caller's ACL. Both ACL files
are tried: the local stack's (deploy/local/stack.sh, the Redis these tests run on; every service
under test runs as its own user, so the suite also proves the grants are enough) by running each
command, and the dev overlay's (deploy/k8s) with ACL DRYRUN on a throwaway Redis. The live
feeds' own paths are tried in test_redis_acl_feeds.py. And a Redis that refuses to say how it
evicts does not stop a service that declares the policy."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis.asyncio as redis
from redis.exceptions import NoPermissionError, ResponseError

from services.runtime import redis_client
from tests.deploy.redis_acl_support import (
    BACKLOG,
    COUNTERS,
    COURSE,
    DEAD,
    EVENTS,
    FEED_WRITERS,
    FEEDS,
    GROUP,
    INBOX,
    LIKE_DEAD,
    LIKE_EVENTS,
    RATE,
    STREAMS,
    USERS,
    WAKE,
    Command,
    allowed,
    channel_allowed,
    channel_refused,
    intact,
    refused,
    run,
    users,
)
from tests.helpers import ROOT
from tests.stack import Env
from tools import redis_server

pytestmark = pytest.mark.asyncio
__all__ = ["users"]


def erasing(key: str, db: int) -> list[Command]:
    """Every way to erase, cut, rename, expire or overwrite `key` (run on the test database: a
    command that got through would only touch the test's own keys; MOVE names the database it is
    in, which Redis refuses after the ACL check)."""
    return [
        ("DEL", key),
        ("UNLINK", key),
        ("EXPIRE", key, 1),
        ("PEXPIRE", key, 1),
        ("EXPIREAT", key, 1),
        ("PEXPIREAT", key, 1),
        ("GETEX", key, "EX", 1),
        ("RENAME", key, f"{key}:x"),
        ("RENAMENX", key, f"{key}:x"),
        ("MOVE", key, db),
        ("COPY", RATE, key, "REPLACE"),
        ("RESTORE", key, 0, "x", "REPLACE"),
        ("SORT", RATE, "STORE", key),
        ("SET", key, "0"),
        ("GETSET", key, "0"),
        ("GETDEL", key),
        ("SETRANGE", key, 0, "0"),
        ("APPEND", key, "0"),
        ("XTRIM", key, "MAXLEN", 0),
        ("XADD", key, "MAXLEN", 0, "*", "a", "1"),
        ("XADD", key, "MINID", "9999999999999", "*", "a", "1"),
        ("XDEL", key, "0-1"),
        ("XSETID", key, "9999999999999-0"),
        ("XGROUP", "DESTROY", key, GROUP),
        ("XGROUP", "SETID", key, GROUP, "$"),
        ("XGROUP", "DELCONSUMER", key, GROUP, "c"),
    ]


# No Redis ACL can refuse these: an ACL allows a command on a key, never its options (XADD's
# MAXLEN / MINID trim the stream it appends to), and scripts run with the caller's rights. What
# each user can so erase is only what its work needs: a producer trims its own append streams,
# the flusher deletes entries it acknowledged and caps the dead letters. A feed writer keeps its
# feeds bounded (APPEND trims by age and count, records what it removed, expires an idle feed)
# and caps the wake streams: it can cut the feeds it writes, which are derived from what is
# stored (a watcher that missed entries is told to reset and refetch), never another's.
INHERENT = {
    ("ingest", "XADD", EVENTS),
    ("likes", "XADD", LIKE_EVENTS),
    ("flusher", "XDEL", EVENTS),
    ("flusher", "XDEL", LIKE_EVENTS),
    ("flusher", "XADD", DEAD),
    ("flusher", "XADD", LIKE_DEAD),
    *(
        (writer, command, feed)
        for writer, feeds in FEED_WRITERS.items()
        for feed in feeds
        for command in ("XADD", "XTRIM", "XSETID", "EXPIRE", "DEL")
    ),
    *((writer, "XADD", WAKE) for writer in FEED_WRITERS),
    # A feed's first epoch deletes what an epochless feed held (services/streams/lua/live/
    # feed.lua): a watch "from now on" may begin it. Its watchers are told to reset.
    ("timeline", "DEL", INBOX),
    ("timeline", "DEL", COURSE),
}

# Server-wide erasures: tried with ACL DRYRUN only (the test database is not the only one).
SERVER_WIDE: list[Command] = [("FLUSHALL",), ("SWAPDB", 0, 1), ("FLUSHDB",)]


def erasures(user: str, db: int = 0) -> list[Command]:
    """Every erasure of every stream, counter and live feed that `user` must be refused (`db`:
    the database the keys are in)."""
    return [
        command
        for key in (*STREAMS, *COUNTERS, *FEEDS)
        for command in erasing(key, db)
        if (user, command[0], key) not in INHERENT
    ]


def acl_file_users(text: str) -> dict[str, str]:
    """An ACL file's `user` lines by user name."""
    return {line.split()[1]: line for line in text.splitlines() if line.startswith("user ")}


# What no service may run on any key: reading the keyspace, the server's configuration and users,
# scripts of its own, other clients.
NEVER: list[Command] = [
    ("KEYS", "*"),
    ("SCAN", 0),
    ("CONFIG", "GET", "requirepass"),
    ("CONFIG", "GET", "maxmemory-policy"),
    ("ACL", "LIST"),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("EVAL", "return 1", 0),
    ("XADD", "elsewhere", "*", "a", "1"),
    ("GET", "elsewhere"),
]

# What redis-py's cluster client needs of every user (the single Redis answers them with an
# error of its own, never NOPERM).
CLUSTER: list[Command] = [
    ("CLUSTER", "SLOTS"),
    ("CLUSTER", "SHARDS"),
    ("CLUSTER", "NODES"),
    ("CLUSTER", "INFO"),
    ("CLUSTER", "MYID"),
    ("READONLY",),
    ("READWRITE",),
    ("ASKING",),
    ("COMMAND",),
    ("TIME",),
    ("INFO", "memory"),
    ("WAIT", 0, 10),
]


@pytest.mark.parametrize("user", USERS)
async def test_a_service_user_cannot_erase_a_stream_or_a_counter(
    users: dict[str, redis.Redis], env: Env, user: str
) -> None:
    admin = redis.Redis.from_url(env.redis_url)
    db = int(urlsplit(env.redis_url).path.strip("/") or 0)
    try:
        before = await intact(admin)
        client = users[user]
        got_through = []
        for command in erasures(user, db):
            try:
                await run(client, command)
            except NoPermissionError:
                continue
            except ResponseError:
                pass  # allowed, then refused for the key's type or the arguments
            got_through.append(command)
        assert not got_through, f"{user} could {got_through}"
        # Nor from a script: each command a script runs is checked against the caller's ACL.
        script = "return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))"
        sha = await client.script_load(script)
        for command in erasures(user, db):
            name, key, *rest = command
            if name in ("XGROUP", "COPY", "SORT"):
                continue  # the key is not their first argument
            with pytest.raises((NoPermissionError, ResponseError)) as refused:
                await client.evalsha(sha, 1, key, name, *rest)
            assert any(
                why in str(refused.value) for why in ("permission", "can't run", "can't access")
            ), (user, command, refused.value)
        for command in SERVER_WIDE:
            reply = await admin.execute_command("ACL", "DRYRUN", f"agora-{user}", *command)
            assert reply != b"OK", (user, command)
        assert await intact(admin) == before
    finally:
        await admin.aclose()


@pytest.mark.parametrize("user", USERS)
async def test_a_service_user_runs_its_own_commands_and_nothing_else(
    users: dict[str, redis.Redis], user: str
) -> None:
    client = users[user]
    for command in [*refused(user), *NEVER]:
        with pytest.raises(NoPermissionError):
            await run(client, command)
    for command in [*allowed(user), *CLUSTER]:
        try:
            await run(client, command)
        except NoPermissionError:
            pytest.fail(f"{user} may not {command}")
        except ResponseError:
            pass  # allowed, and answered (a single Redis has no CLUSTER SLOTS)


@pytest.mark.parametrize("user", USERS)
async def test_a_service_user_publishes_and_subscribes_on_its_own_channels_only(
    env: Env, user: str
) -> None:
    """Pub/sub channels are granted as keys are: each declared channel family's commands to
    the services the keyspace names, on its channels only (asked with ACL DRYRUN)."""
    admin = redis.Redis.from_url(env.redis_url)
    try:
        for command in channel_allowed(user):
            reply = await admin.execute_command("ACL", "DRYRUN", f"agora-{user}", *command)
            assert reply == b"OK", (user, command, reply)
        for command in channel_refused(user):
            reply = await admin.execute_command("ACL", "DRYRUN", f"agora-{user}", *command)
            assert reply != b"OK", (user, command)
    finally:
        await admin.aclose()


async def test_what_no_acl_can_refuse_reaches_only_the_users_own_streams(
    users: dict[str, redis.Redis], env: Env
) -> None:
    """XADD's trimming options come with XADD: ingest and likes can trim the streams they
    append to (an attacker holding their credentials can drop what is not flushed yet), and
    nothing else; their counters take any increment. Alerts on the streams' lag and the flusher's
    own count of what it stored are the way to notice it (docs/security.md)."""
    admin = redis.Redis.from_url(env.redis_url)
    try:
        await users["ingest"].execute_command("XADD", EVENTS, "MAXLEN", 0, "*", "a", "1")
        assert await admin.xlen(EVENTS) == 0
        await users["ingest"].execute_command("INCRBY", BACKLOG, -5)
        assert await admin.get(BACKLOG) == b"0"
        for user, stream in (("ingest", LIKE_EVENTS), ("ingest", DEAD), ("likes", EVENTS)):
            with pytest.raises(NoPermissionError):
                await users[user].execute_command("XADD", stream, "MAXLEN", 0, "*", "a", "1")
        assert await admin.xlen(LIKE_EVENTS) == await admin.xlen(DEAD) == 1
    finally:
        await admin.aclose()


# ---- the dev overlay's ACL (deploy/k8s), the same rules ----


async def test_the_dev_overlays_users_have_the_same_rights() -> None:
    """The dev overlay's file (the Redis Cluster component mounts it too), loaded into a
    throwaway Redis, asked with ACL DRYRUN: the same answers, command by command."""
    text = (ROOT / "deploy/k8s/overlays/dev/datastores/redis/redis-users.acl").read_text()
    lines = acl_file_users(text)
    assert sorted(lines) == sorted(["default", *(f"agora-{u}" for u in USERS)])
    # The operator's password stays out of the test: `default` without one, the rest as is.
    lines["default"] = "user default on nopass ~* &* +@all"
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "users.acl"
        path.write_text("\n".join(lines.values()) + "\n")
        async with redis_server.running("--aclfile", str(path)) as url:
            admin = redis.Redis.from_url(url)
            try:
                for user in USERS:

                    async def dry(command: Command, name: str = f"agora-{user}") -> bytes:
                        reply: bytes = await admin.execute_command("ACL", "DRYRUN", name, *command)
                        return reply

                    for command in [*allowed(user), *channel_allowed(user), *CLUSTER]:
                        assert await dry(command) == b"OK", (user, command, await dry(command))
                    for command in [
                        *refused(user),
                        *channel_refused(user),
                        *NEVER,
                        *erasures(user),
                        *SERVER_WIDE,
                    ]:
                        assert await dry(command) != b"OK", (user, command)
            finally:
                await admin.aclose()


# ---- a Redis that says nothing ----


async def test_a_redis_that_refuses_info_is_trusted_as_declared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with redis_server.running("--maxmemory-policy", "allkeys-lru") as url:
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
