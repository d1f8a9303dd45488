"""Least privilege in Redis: each service's user runs the commands its code and scripts run, each
on its own key family only, and nothing that erases, cuts, renames, expires or overwrites a stream
or a backlog counter — directly or from a script, which Redis checks command by command against
the caller's ACL. Both ACL files are tried: the local stack's (deploy/local/stack.sh, the Redis
these tests run on; every service under test runs as its own user, so the suite also proves the
grants are enough) by running each command, and the dev overlay's (deploy/k8s) with ACL DRYRUN
on a throwaway Redis. The live feeds are derived data with writers and one reader: the flusher,
ingest and likes append to the feeds they write (and may trim them: nothing stored is lost),
timeline reads them and writes nothing. And a Redis that refuses to say how it evicts does not
stop a service that declares the policy."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
import redis.asyncio as redis
from redis.exceptions import NoPermissionError, ResponseError

from services.runtime import redis_client
from services.runtime.stream_ids import ORIGIN, FeedPosition, Position
from services.streams import live
from services.streams.live import (
    Entries,
    FeedEvent,
    FeedReader,
    LiveFeeds,
    LivePublisher,
    LiveSettings,
    Reset,
)
from services.timeline.feed_hub import FeedHub
from tests.helpers import ROOT
from tests.stack import Env
from tools import redis_server

pytestmark = pytest.mark.asyncio

USERS = ("ingest", "likes", "flusher", "gateway", "timeline")
GROUP = "flusher"

EVENTS = "agora:msg:{m0}:events"
BACKLOG = "agora:msg:{m0}:backlog"
BACKLOG_BYTES = "agora:msg:{m0}:backlog-bytes"
RESERVED = "agora:msg:{m0}:backlog-reserved"
DEAD = "agora:msg:{m0}:dead"
LIKE_EVENTS = "forum:{ls0}:like-events"
LIKE_BYTES = "forum:{ls0}:like-events:bytes"
LIKE_DEAD = "forum:{ls0}:like-events:dead"
LIKED = "forum:{ls0}:u:7:c:42:liked"
OPS = "forum:{ls0}:u:7:c:42:ops"
RATE = "agora:ratelimit:like:7"
# The live feeds (an account's inbox, a course) and a wake stream, as services/streams/live.py
# names them.
FEEDS_LAYOUT = LiveFeeds.from_settings(LiveSettings())
INBOX = FEEDS_LAYOUT.inbox(7)
COURSE = FEEDS_LAYOUT.course(42)
WAKE = FEEDS_LAYOUT.wake(0)
FEEDS = (INBOX, COURSE, WAKE)
# Who appends to which feeds (and wakes their watchers): the flusher what its batches stored, ingest
# the forum writes, likes the like counts of its direct modes.
FEED_WRITERS = {"flusher": (INBOX, COURSE), "ingest": (COURSE,), "likes": (COURSE,)}

# Where acknowledged data waits to be flushed, and what bounds it.
STREAMS = (EVENTS, LIKE_EVENTS, DEAD, LIKE_DEAD)
COUNTERS = (BACKLOG, BACKLOG_BYTES, LIKE_BYTES)

Command = tuple[str | int, ...]


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


def appending(feed: str) -> list[Command]:
    """What a feed writer runs on `feed` and the keys beside it (live.APPEND: check the epoch,
    add, find what to trim by age, count and bytes, trim, record a superseding version, forget
    old ones, expire; live.DROP: a new epoch) and on a wake stream (live.WAKE), any hash tag."""
    meta, versions, versions_at = LiveFeeds.keys(feed)[1:]
    return [
        ("HMGET", meta, "epoch", "node", "last", "deleted", "bytes"),
        ("HSET", meta, "last", "1-0", "deleted", "0-0", "bytes", 10),
        ("EXPIRE", meta, 604_800),
        ("EXISTS", feed),
        ("DEL", feed, versions, versions_at),
        ("TIME",),
        ("INFO", "replication"),
        ("INFO", "memory"),
        ("XADD", feed, "*", "e", "x", "s", "y", "t", "post:1", "v", 2, "w", ""),
        ("HGET", versions, "post:1"),
        ("HSET", versions, "post:1", "2d"),
        ("ZADD", versions_at, 1, "post:1"),
        ("ZRANGEBYSCORE", versions_at, "-inf", "(1", "LIMIT", 0, 1000),
        ("HDEL", versions, "post:1"),
        ("ZREM", versions_at, "post:1"),
        ("XRANGE", feed, "-", "+", "COUNT", 100),
        ("XLEN", feed),
        ("XTRIM", feed, "MINID", "1"),
        ("XTRIM", feed, "MAXLEN", 0),
        ("XSETID", feed, "9999999999999-0", "MAXDELETEDID", "1-0"),
        ("EXPIRE", feed, 7200),
        ("EXPIRE", versions, 7200),
        ("EVALSHA", "0" * 40, 4, feed, meta, versions, versions_at),
        ("XADD", WAKE, "MAXLEN", "~", live.WAKE_MAXLEN, "*", "k", feed),
        ("XADD", FEEDS_LAYOUT.wake(7), "*", "k", feed),
        ("EVALSHA", "0" * 40, 1, WAKE),
    ]


# The feeds' watcher: the feed READ script (HMGET, EXISTS, XRANGE, HGET of versions), ENSURE
# (a first epoch: HMGET, DEL, TIME, INFO, HSET, EXPIRE), the hub's look (HMGET of each meta) and
# its reads of the wake streams (EXISTS, XINFO STREAM, a blocking XREAD).
WATCHING: list[Command] = [
    *(
        command
        for feed in (INBOX, COURSE, FEEDS_LAYOUT.inbox(123456), FEEDS_LAYOUT.course(9))
        for meta, versions, versions_at in [LiveFeeds.keys(feed)[1:]]
        for command in (
            ("HMGET", meta, "epoch", "last", "deleted"),
            ("EXISTS", feed),
            ("XRANGE", feed, "(0-0", "+", "COUNT", 200),
            ("HGET", versions, "post:1"),
            ("DEL", feed),
            ("DEL", versions, versions_at),
            ("HSET", meta, "epoch", "e", "node", "n", "last", "0-0", "deleted", "0-0"),
            ("EXPIRE", meta, 604_800),
            ("EVALSHA", "0" * 40, 3, feed, meta, versions),
            ("EVALSHA", "0" * 40, 4, feed, meta, versions, versions_at),
        )
    ),
    ("TIME",),
    ("INFO", "replication"),
    ("EXISTS", WAKE),
    ("XINFO", "STREAM", WAKE),
    ("XREAD", "COUNT", 1000, "BLOCK", 1, "STREAMS", WAKE, "0-0"),
    ("XREAD", "COUNT", 1000, "STREAMS", WAKE, FEEDS_LAYOUT.wake(7), "0-0", "0-0"),
    ("INFO", "memory"),
]


# What each service runs (its code and its Lua scripts, by key family), and must keep running.
ALLOWED: dict[str, list[Command]] = {
    "ingest": [
        ("XADD", EVENTS, "*", "a", "1"),
        ("GET", BACKLOG),
        ("INCRBY", BACKLOG, 1),
        ("INCRBY", BACKLOG_BYTES, 10),
        ("HSET", RESERVED, "call", "1:1:1"),
        ("HGETALL", RESERVED),
        ("HDEL", RESERVED, "call"),
        ("SET", "agora:msg:{m0}:backlog-rates", "1 1 1", "PX", 1000),
        ("GET", "agora:msg:{m0}:backlog-rate:12"),
        ("SET", "agora:msg:{m0}:backlog-rate:12", "1 1", "PX", 1000),
        ("DEL", "forum:{c42}:access-version"),
        # A keyed append's response: claimed (SET NX GET), kept, read, given back.
        ("SET", "agora:msg:idempotency:1:ab", "r", "NX", "PX", 1000, "GET"),
        ("SET", "agora:msg:idempotency:1:ab", "d", "PX", 1000),
        ("GET", "agora:msg:idempotency:1:ab"),
        ("DEL", "agora:msg:idempotency:1:ab"),
        # Any shard: the patterns name the hash tag's family, not one tag.
        ("INCRBY", "agora:msg:{m3}:backlog-bytes", 1),
        ("WAIT", 0, 10),
        ("INFO", "memory"),
        *appending(COURSE),
    ],
    "likes": [
        ("EXISTS", LIKED),
        ("SADD", LIKED, "p:1"),
        ("SREM", LIKED, "p:1"),
        ("SISMEMBER", LIKED, "p:1"),
        ("SMISMEMBER", LIKED, "p:1", "p:2"),
        ("EXPIRE", LIKED, 600),
        ("DEL", LIKED),
        ("HSET", OPS, "p:1", "like:1-1"),
        ("HGET", OPS, "p:1"),
        ("HGETALL", OPS),
        ("HDEL", OPS, "p:1"),
        ("SET", "forum:{ls0}:u:7:c:42:direct", "busy:x", "PX", 1000),
        ("GET", "forum:{ls0}:u:7:c:42:direct"),
        ("XADD", LIKE_EVENTS, "*", "a", "1"),
        ("XLEN", LIKE_EVENTS),
        ("GET", LIKE_BYTES),
        ("INCRBY", LIKE_BYTES, 10),
        ("GET", "forum:{c42}:access-version"),
        ("SET", "forum:{c42}:access-version", "v", "NX", "EX", 60),
        ("SADD", "forum:{dirty}:posts", "1"),
        ("XLEN", "forum:{ls2}:like-events"),
        ("WAIT", 0, 10),
        *appending(COURSE),
    ],
    "flusher": [
        ("XGROUP", "CREATE", EVENTS, "other", "0", "MKSTREAM"),
        ("XREADGROUP", "GROUP", GROUP, "f", "COUNT", 1, "STREAMS", EVENTS, ">"),
        ("XREADGROUP", "GROUP", GROUP, "f", "COUNT", 1, "STREAMS", LIKE_EVENTS, "0"),
        ("XREAD", "COUNT", 1, "STREAMS", EVENTS, "0"),
        ("XREVRANGE", EVENTS, "+", "-", "COUNT", 1),
        ("XAUTOCLAIM", EVENTS, GROUP, "f", 1000, "0-0", "COUNT", 1),
        ("XPENDING", EVENTS, GROUP),
        ("XPENDING", EVENTS, GROUP, "-", "+", 10),
        ("XINFO", "GROUPS", LIKE_EVENTS),
        ("XLEN", EVENTS),
        ("XACK", EVENTS, GROUP, "0-1"),
        ("XDEL", LIKE_EVENTS, "0-1"),
        ("EXISTS", f"{EVENTS}:failures"),
        ("HINCRBY", f"{LIKE_EVENTS}:failures", "1-1", 1),
        ("PEXPIRE", f"{EVENTS}:failures", 1000),
        ("HDEL", f"{EVENTS}:failures", "1-1"),
        ("XADD", DEAD, "MAXLEN", "~", 1000, "*", "a", "1"),
        ("XRANGE", LIKE_DEAD, "-", "+", "COUNT", 1),
        ("GET", BACKLOG_BYTES),
        ("DECRBY", BACKLOG, 1),
        ("DECRBY", LIKE_BYTES, 1),
        ("SET", "agora:msg:{m0}:lease", "f", "NX", "PX", 1000),
        ("PEXPIRE", "forum:{ls0}:lease", 1000),
        ("INCR", "forum:{ls0}:lease:epoch"),
        ("SET", "agora:msg:{m0}:lease:epoch", "7"),
        ("DEL", "agora:msg:{m0}:lease"),
        ("ZADD", "agora:msg:lease-members", 1, "f"),
        ("ZREMRANGEBYSCORE", "forum:like-lease-members", "-inf", 0),
        ("ZCARD", "agora:msg:lease-members"),
        ("HGET", OPS, "p:1"),
        ("HSET", OPS, "p:1", "dead:like:1-1"),
        ("HDEL", OPS, "p:1"),
        ("SADD", "forum:{dirty}:comments", "1"),
        ("SPOP", "forum:{dirty}:posts", 10),
        ("ZADD", "agora:prune:{prune}:due", "NX", 1, "5"),
        ("ZRANGEBYSCORE", "agora:prune:{prune}:running", "-inf", 1),
        ("ZREM", "agora:prune:{prune}:due", "5"),
        ("SET", "agora:prune:lock:5", "t", "NX", "PX", 1000),
        ("PTTL", "agora:jobs:capacity-sample:running"),
        ("SET", "agora:jobs:capacity-sample:period", "1", "NX", "PX", 1000),
        ("DEL", "agora:jobs:capacity-sample:period"),
        ("INFO", "stats"),
        *appending(INBOX),
        *appending(COURSE),
    ],
    "gateway": [
        ("TIME",),
        ("ZREMRANGEBYSCORE", RATE, "-inf", 1),
        ("ZCARD", RATE),
        ("ZADD", RATE, 2, "2:0"),
        ("ZRANGE", RATE, 0, 0, "WITHSCORES"),
        ("PEXPIRE", RATE, 60000),
        # The leases of its users' open event streams.
        ("ZREMRANGEBYSCORE", "agora:live-streams:7", "-inf", 1),
        ("ZCARD", "agora:live-streams:7"),
        ("ZADD", "agora:live-streams:7", 2, "m"),
        ("ZRANGE", "agora:live-streams:7", 0, 0, "WITHSCORES"),
        ("ZREM", "agora:live-streams:7", "m"),
        ("PEXPIRE", "agora:live-streams:7", 90_000),
    ],
    "timeline": WATCHING,
}

# The feeds a user may not write, and the reads that are the watchers' (timeline's).
FEED_REFUSED: dict[str, list[Command]] = {
    "inbox": [
        ("XADD", INBOX, "*", "e", "x"),
        ("XADD", FEEDS_LAYOUT.inbox(99), "*", "e", "x"),
        ("HSET", f"{INBOX}:meta", "epoch", "forged"),
        ("DEL", f"{INBOX}:versions"),
        ("XLEN", INBOX),
        ("EVALSHA", "0" * 40, 1, INBOX),
    ],
    "read": [
        ("XINFO", "STREAM", COURSE),
        ("XREAD", "COUNT", 1, "STREAMS", WAKE, "0"),
        ("XRANGE", WAKE, "-", "+"),
        ("XINFO", "STREAM", WAKE),
    ],
}


# What each user must not do beyond erasing: read or write another service's keys, consume or
# acknowledge what it produces, administer the server.
REFUSED: dict[str, list[Command]] = {
    "ingest": [
        ("XACK", EVENTS, GROUP, "0-1"),
        ("XREADGROUP", "GROUP", GROUP, "x", "COUNT", 1, "STREAMS", EVENTS, ">"),
        ("XRANGE", EVENTS, "-", "+"),
        ("SET", "agora:msg:{m0}:lease", "me"),
        ("XADD", DEAD, "*", "a", "1"),
        ("GET", "agora:prune:{prune}:due"),
        ("XADD", LIKE_EVENTS, "*", "a", "1"),
        ("SADD", LIKED, "p:1"),
        ("GET", "forum:{c42}:access-version"),
        ("INCRBY", EVENTS, 1),
        ("HSET", BACKLOG, "a", "1"),
        ("DEL", BACKLOG),
        ("EXPIRE", "agora:msg:idempotency:1:ab", 1),
        ("KEYS", "*"),
        ("CONFIG", "GET", "requirepass"),
        ("EVAL", "return 1", 0),
        # The courses' feeds only (forum writes): no inbox, no reading the feeds or the wakes.
        *FEED_REFUSED["inbox"],
        *FEED_REFUSED["read"],
    ],
    "likes": [
        ("XADD", EVENTS, "*", "a", "1"),
        ("XACK", LIKE_EVENTS, GROUP, "0-1"),
        ("XRANGE", LIKE_EVENTS, "-", "+"),
        ("SET", "forum:{ls0}:lease", "me"),
        ("XADD", LIKE_DEAD, "*", "a", "1"),
        ("SPOP", "forum:{dirty}:posts"),
        ("DEL", "forum:{c42}:access-version"),
        ("KEYS", "*"),
        ("SCAN", 0),
        *FEED_REFUSED["inbox"],
        *FEED_REFUSED["read"],
    ],
    "flusher": [
        ("GET", RATE),
        ("XADD", EVENTS, "*", "a", "1"),
        ("XADD", LIKE_EVENTS, "*", "a", "1"),
        ("INCRBY", BACKLOG, 1),
        ("HGETALL", RESERVED),
        ("SADD", LIKED, "p:1"),
        ("DEL", OPS),
        ("XDEL", DEAD, "0-1"),
        ("CONFIG", "GET", "maxmemory-policy"),
        ("ACL", "LIST"),
        ("CLIENT", "KILL", "TYPE", "normal"),
        # It writes the feeds; the watchers read them (and the wakes).
        *FEED_REFUSED["read"],
    ],
    "gateway": [
        ("XRANGE", EVENTS, "-", "+"),
        ("GET", BACKLOG),
        ("SMEMBERS", LIKED),
        ("XADD", "agora:ratelimit:x", "*", "a", "1"),
        ("GET", "forum:{ls2}:lease"),
        ("DEL", RATE),
        ("SET", RATE, "0"),
        ("INCRBY", RATE, -100),
        ("ZREM", RATE, "2:0"),
        ("EXPIRE", RATE, 1),
        *FEED_REFUSED["inbox"],
        *FEED_REFUSED["read"],
        ("XADD", COURSE, "*", "e", "x"),
        ("XADD", WAKE, "*", "k", COURSE),
    ],
    "timeline": [
        # Adds nothing to a feed or a wake stream, trims none, records no version: it only
        # begins a feed's first epoch.
        ("XADD", INBOX, "*", "e", "x"),
        ("XADD", COURSE, "*", "e", "x"),
        ("XADD", WAKE, "*", "k", INBOX),
        ("XDEL", INBOX, "0-1"),
        ("XTRIM", COURSE, "MAXLEN", 0),
        ("XLEN", COURSE),
        ("XREVRANGE", INBOX, "+", "-", "COUNT", 1),
        ("HSET", f"{COURSE}:versions", "post:1", "9d"),
        ("ZADD", f"{COURSE}:versions-at", 1, "post:1"),
        ("XINFO", "GROUPS", INBOX),
        ("XGROUP", "CREATE", WAKE, "hub", "$", "MKSTREAM"),
        ("XREADGROUP", "GROUP", "hub", "t", "COUNT", 1, "STREAMS", WAKE, ">"),
        # Touches neither the message nor the like streams, nor any other service's keys.
        ("XRANGE", EVENTS, "-", "+"),
        ("XREAD", "COUNT", 1, "STREAMS", EVENTS, "0"),
        ("XINFO", "STREAM", LIKE_EVENTS),
        ("EXISTS", LIKE_EVENTS),
        ("XADD", EVENTS, "*", "a", "1"),
        ("XADD", LIKE_EVENTS, "*", "a", "1"),
        ("EXISTS", LIKED),
        ("GET", BACKLOG),
        ("GET", "forum:{c42}:access-version"),
        ("INCR", RATE),
        ("EVALSHA", "0" * 40, 1, EVENTS),
        ("EVAL", "return 1", 0),
        ("KEYS", "live:*"),
        ("SCAN", 0, "MATCH", "live:*"),
        ("CONFIG", "GET", "maxmemory-policy"),
    ],
}

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
]


def erasures(user: str, db: int = 0) -> list[Command]:
    """Every erasure of every stream, counter and live feed that `user` must be refused (`db`:
    the database the keys are in)."""
    return [
        command
        for key in (*STREAMS, *COUNTERS, *FEEDS)
        for command in erasing(key, db)
        if (user, command[0], key) not in INHERENT
    ]


async def run(client: redis.Redis, command: Command) -> object:
    """`command`'s reply as Redis sends it (no redis-py reply parsing: the arguments here are
    chosen for the ACL, not for redis-py's reply callbacks)."""
    connection = await client.connection_pool.get_connection()
    try:
        await connection.send_command(*command)
        return await connection.read_response()
    finally:
        await client.connection_pool.release(connection)


def acl_file_users(text: str) -> dict[str, str]:
    """An ACL file's `user` lines by user name."""
    return {line.split()[1]: line for line in text.splitlines() if line.startswith("user ")}


# ---- the local stack's ACL, on the Redis the tests run on ----


@pytest_asyncio.fixture
async def users(env: Env) -> AsyncIterator[dict[str, redis.Redis]]:
    clients = {
        "ingest": redis.Redis.from_url(env.redis_ingest_url),
        "likes": redis.Redis.from_url(env.redis_likes_url),
        "flusher": redis.Redis.from_url(env.redis_flusher_url),
        "gateway": redis.Redis.from_url(env.redis_gateway_url),
        "timeline": redis.Redis.from_url(env.redis_timeline_url),
    }
    admin = redis.Redis.from_url(env.redis_url)
    await admin.flushdb()
    await seed(admin)
    yield clients
    await admin.flushdb()
    await admin.aclose()
    for client in clients.values():
        await client.aclose()


async def seed(admin: redis.Redis) -> None:
    """One entry in every stream (each with the flusher's group), a value in every counter, two
    in every feed."""
    for stream in STREAMS:
        await admin.xadd(stream, {"a": "1"})
        await admin.xgroup_create(stream, GROUP, "0")
    for counter in COUNTERS:
        await admin.set(counter, "5")
    await admin.set(RATE, "1")
    writer = LivePublisher(admin, FEEDS_LAYOUT)
    for feed in FEEDS:
        if feed == WAKE:
            for n in (1, 2):
                await admin.xadd(feed, {"k": str(n)})
        else:
            await writer.publish({feed: [FeedEvent(b"1"), FeedEvent(b"2")]})


async def intact(admin: redis.Redis) -> dict[str, object]:
    """What the erasures would have changed: each stream's length, group and last id, each
    counter's value and every key's time to live."""
    state: dict[str, object] = {}
    for stream in STREAMS:
        info = await admin.xinfo_stream(stream)
        groups = [g["name"] for g in await admin.xinfo_groups(stream)]
        state[stream] = (info["length"], info["last-generated-id"], groups)
    for counter in COUNTERS:
        state[counter] = await admin.get(counter)
    for feed in FEEDS:
        info = await admin.xinfo_stream(feed)
        state[feed] = (info["length"], info["last-generated-id"], info["max-deleted-entry-id"])
    for key in (*STREAMS, *COUNTERS, *FEEDS):
        # In minutes: a feed's time to live runs down while the test runs (an erasure's is 1 s).
        ttl = await admin.pttl(key)
        state[f"ttl {key}"] = ttl if ttl < 0 else round(ttl / 60_000)
    return state


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
    for command in REFUSED[user]:
        with pytest.raises(NoPermissionError):
            await run(client, command)
    for command in [*ALLOWED[user], *CLUSTER]:
        try:
            await run(client, command)
        except NoPermissionError:
            pytest.fail(f"{user} may not {command}")
        except ResponseError:
            pass  # allowed, and answered (a single Redis has no CLUSTER SLOTS)


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


# ---- the live feeds: the code's own scripts, as each user runs them ----

# One entry kept per feed: APPEND then trims on every call (XRANGE, XTRIM run too).
TIGHT = LiveFeeds(FEEDS_LAYOUT.prefix, FEEDS_LAYOUT.retention_ms, 1, FEEDS_LAYOUT.wake_shards)


def refused(error: BaseException) -> bool:
    """A Redis error that is the ACL's refusal (from a script: the command it could not run)."""
    return isinstance(error, NoPermissionError) or any(
        why in str(error) for why in ("permission", "can't run", "can't access")
    )


def edited(author: str) -> list[FeedEvent]:
    """A post and its edit: the edit records its version, which supersedes the first."""
    return [
        FeedEvent(f"{author} 1".encode(), target="post:1", version=1, stub=b"stub"),
        FeedEvent(f"{author} 2".encode(), target="post:1", version=2, stub=b"stub"),
    ]


async def test_every_feed_path_runs_as_its_services_user(
    users: dict[str, redis.Redis], env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Each path the code takes on the live feeds, run by the code as the user of the service
    that takes it: a writer appends (live.APPEND: epoch, add, record a version, trim by count,
    expire) and wakes the watchers (live.WAKE); past the memory ceiling it drops the feed (a new
    epoch), and past Redis's maxmemory it runs live.DROP. timeline begins an epoch for a watch
    "from now on" (live.ENSURE), reads after a position (live.READ), follows the wake streams and
    looks at every watched feed's newest position (the hub's look, which logs instead of raising:
    the log is checked)."""
    admin = redis.Redis.from_url(env.redis_url)
    maxmemory: Any = (await admin.config_get("maxmemory"))["maxmemory"]
    try:
        for writer, feeds in FEED_WRITERS.items():
            await admin.delete(*TIGHT.all_wakes())
            client = users[writer]
            publisher = LivePublisher(client, TIGHT)
            assert await publisher.publish({feed: edited(writer) for feed in feeds}) == []
            for feed in feeds:
                meta: Any = await admin.hgetall(f"{feed}:meta")
                assert await admin.xlen(feed) == 1, (writer, feed)
                assert meta[b"deleted"] != b"0-0", (writer, feed)
                assert await admin.hget(f"{feed}:versions", "post:1") == b"2", (writer, feed)
                assert 0 < await admin.ttl(feed) <= TIGHT.retention_ms // 1000 * 2, (writer, feed)
                # Its watchers are woken (publish logs a refused wake-up and goes on: look).
                woken: Any = await admin.xrange(TIGHT.wake_of(feed))
                assert feed.encode() in {fields[b"k"] for _, fields in woken}, (writer, feed)
            # Past the ceiling (a maxmemory far away, a ceiling nearer still): dropped.
            await admin.config_set("maxmemory", str(64 * 1024**3))
            ceiling = LivePublisher(client, replace(TIGHT, memory_ceiling=1e-9))
            assert await ceiling.publish({feed: edited(writer) for feed in feeds}) == list(feeds)
            await admin.config_set("maxmemory", maxmemory)
            for feed in feeds:
                assert await admin.exists(feed) == 0, (writer, feed)
                await client.register_script(live.DROP)(keys=LiveFeeds.keys(feed), args=[60])
                assert await admin.hget(f"{feed}:meta", "last") == b"0-0", (writer, feed)
            await publisher.publish({feed: edited(writer) for feed in feeds})

        reader = FeedReader(users["timeline"], FEEDS_LAYOUT)
        for feed in (INBOX, COURSE):
            meta = await admin.hgetall(f"{feed}:meta")
            head = FeedPosition(meta[b"epoch"].decode(), Position.parse(meta[b"last"]))
            assert await reader.head(feed) == head
            assert await reader.newest([feed]) == [head]
            trimmed = FeedPosition(head.epoch, Position.parse(meta[b"deleted"]))
            assert isinstance(await reader.after(feed, replace(trimmed, entry=ORIGIN), 10), Reset)
            resumed = await reader.after(feed, trimmed, 10)
            assert isinstance(resumed, Entries)
            last_writer = "flusher" if feed == INBOX else "likes"
            assert [item.payload for item in resumed.items] == [f"{last_writer} 2".encode()]
            assert resumed.position == head
        # A feed never written: its first epoch, begun by the watch.
        fresh = FEEDS_LAYOUT.inbox(555)
        start = await reader.head(fresh)
        assert start.entry == ORIGIN
        assert await reader.after(fresh, start, 10) == Entries([], start, False)
        assert await reader.newest([fresh, FEEDS_LAYOUT.inbox(556)]) == [start, None]

        # The hub as timeline runs it: the wake streams, and the look every poll period.
        hub = FeedHub(users["timeline"], FEEDS_LAYOUT, poll_seconds=0.5, block_ms=100)
        stop = asyncio.Event()
        running = asyncio.create_task(hub.run(stop))
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="services.timeline.feed_hub"):
                follow: Any = hub.follow(fresh, start, time.time() + 10)
                first: asyncio.Task[Any] = asyncio.ensure_future(anext(follow))
                await asyncio.sleep(0.3)
                await LivePublisher(users["flusher"], FEEDS_LAYOUT).publish(
                    {fresh: [FeedEvent(b"woken")]}
                )
                delivery = await asyncio.wait_for(first, 5)
                await asyncio.sleep(1.5)  # looks at the followed feed, every poll period
                await follow.aclose()
            assert delivery.payload == b"woken"
            assert caplog.records == []
        finally:
            stop.set()
            await running
    finally:
        await admin.config_set("maxmemory", maxmemory)
        await admin.aclose()


# Feeds each user's scripts must not write: ingest and likes write courses' feeds only, the
# gateway and timeline none.
APPEND_REFUSED = {
    "ingest": (INBOX,),
    "likes": (INBOX, FEEDS_LAYOUT.inbox(99)),
    "gateway": (INBOX, COURSE),
    "timeline": (INBOX, COURSE),
}


@pytest.mark.parametrize("user", sorted(APPEND_REFUSED))
async def test_the_feed_scripts_write_only_their_writers_feeds(
    users: dict[str, redis.Redis], env: Env, user: str
) -> None:
    admin = redis.Redis.from_url(env.redis_url)
    try:
        before = await intact(admin)
        client = users[user]
        publisher = LivePublisher(client, FEEDS_LAYOUT)
        for feed in APPEND_REFUSED[user]:
            with pytest.raises(ResponseError) as error:
                await publisher.publish({feed: [FeedEvent(b"forged")]})
            assert refused(error.value), (user, feed, error.value)
        if user not in FEED_WRITERS:
            # Nor wake anyone.
            with pytest.raises(ResponseError) as error:
                await client.register_script(live.WAKE)(keys=[WAKE], args=[COURSE])
            assert refused(error.value), (user, error.value)
        if user not in FEED_WRITERS and user != "timeline":
            # Reading a feed is the watchers' (and its writers' own scripts').
            with pytest.raises(ResponseError) as error:
                await FeedReader(client, FEEDS_LAYOUT).after(COURSE, FeedPosition("e", ORIGIN), 9)
            assert refused(error.value), (user, error.value)
        after = await intact(admin)
        if user in FEED_WRITERS:
            # A writer wakes in the same round trip as it appends: a refused append may still
            # wake the feed's watchers, who find nothing new.
            for state in (before, after):
                state.pop(WAKE)
        assert after == before
    finally:
        await admin.aclose()


async def test_a_feed_writer_can_cut_only_the_feeds_it_writes(
    users: dict[str, redis.Redis], env: Env
) -> None:
    """APPEND trims and expires the feeds it writes and DROP deletes them (a new epoch), so their
    writers hold XTRIM, EXPIRE and DEL there and no ACL tells APPEND's trim from any other: a
    writer's credentials can cut, expire or delete those feeds (and cap a wake stream). The feeds
    are derived (what they carry is stored in MariaDB and PostgreSQL): a cut loses live events,
    never data, and the watchers reset and refetch. Never another writer's feeds, never the
    message or like streams (docs/security.md)."""
    admin = redis.Redis.from_url(env.redis_url)
    try:
        await users["ingest"].execute_command("XTRIM", COURSE, "MAXLEN", 0)
        assert await admin.xlen(COURSE) == 0
        await users["flusher"].execute_command("EXPIRE", INBOX, 1000)
        assert 0 < await admin.ttl(INBOX) <= 1000
        await users["likes"].execute_command("XADD", WAKE, "MAXLEN", 0, "*", "k", COURSE)
        assert await admin.xlen(WAKE) == 0
        for user, command in (
            ("ingest", ("XTRIM", INBOX, "MAXLEN", 0)),
            ("likes", ("EXPIRE", INBOX, 1)),
            ("likes", ("XTRIM", EVENTS, "MAXLEN", 0)),
            ("ingest", ("XTRIM", LIKE_EVENTS, "MAXLEN", 0)),
            ("flusher", ("XTRIM", EVENTS, "MAXLEN", 0)),
            ("timeline", ("XTRIM", COURSE, "MAXLEN", 0)),
            ("timeline", ("XADD", WAKE, "MAXLEN", 0, "*", "k", COURSE)),
        ):
            with pytest.raises(NoPermissionError):
                await users[user].execute_command(*command)
        assert await admin.xlen(INBOX) == 2
        assert await admin.xlen(EVENTS) == await admin.xlen(LIKE_EVENTS) == 1
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

                    for command in [*ALLOWED[user], *CLUSTER]:
                        assert await dry(command) == b"OK", (user, command, await dry(command))
                    for command in [*REFUSED[user], *erasures(user), *SERVER_WIDE]:
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
