"""What the Redis ACL tests share: example keys of every family (services/keyspace), each
service's own client as its Redis user, and a valid invocation of every command a family grants,
so the grants and refusals are derived from the keyspace, command by command."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest_asyncio
import redis.asyncio as redis

from services import keyspace
from services.streams.live import FeedEvent, LiveFeeds, LivePublisher, LiveSettings
from tests.stack import Env

USERS = keyspace.SERVICES
GROUP = "flusher"

EVENTS = keyspace.family("messages.events").key(shard=0)
BACKLOG = keyspace.family("messages.backlog").key(shard=0)
BACKLOG_BYTES = keyspace.family("messages.backlog_bytes").key(shard=0)
DEAD = keyspace.family("messages.dead").key(shard=0)
LIKE_EVENTS = keyspace.family("likes.events").key(shard=0)
LIKE_BYTES = keyspace.family("likes.bytes").key(shard=0)
LIKE_DEAD = keyspace.family("likes.dead").key(shard=0)
RATE = keyspace.family("coordination.rate_limit").key(limit="like", subject=7)
FEEDS_LAYOUT = LiveFeeds.from_settings(LiveSettings())
INBOX = FEEDS_LAYOUT.inbox(7)
COURSE = FEEDS_LAYOUT.course(42)
WAKE = FEEDS_LAYOUT.wake(0)
FEEDS = (INBOX, COURSE, WAKE)
# Who appends to which feeds (and wakes their watchers): the flusher what its batches stored,
# ingest the forum writes and the replies' send orders, likes the like counts of its direct
# modes.
FEED_WRITERS = {"flusher": (INBOX, COURSE), "ingest": (INBOX, COURSE), "likes": (COURSE,)}
# Where acknowledged data waits to be flushed, and what bounds it.
STREAMS = (EVENTS, LIKE_EVENTS, DEAD, LIKE_DEAD)
COUNTERS = (BACKLOG, BACKLOG_BYTES, LIKE_BYTES)

Command = tuple[str | int, ...]
_NO_SCRIPT = "0" * 40

# A valid invocation of each command the keyspace grants, on one key (the ACL checks the command
# and every key it names; what Redis answers after that does not matter here).
SHAPES: dict[str, Callable[[str], Command]] = {
    "xadd": lambda k: ("XADD", k, "*", "a", "1"),
    "xgroup|create": lambda k: ("XGROUP", "CREATE", k, "acl", "0", "MKSTREAM"),
    "xreadgroup": lambda k: ("XREADGROUP", "GROUP", GROUP, "c", "COUNT", 1, "STREAMS", k, ">"),
    "xread": lambda k: ("XREAD", "COUNT", 1, "STREAMS", k, "0"),
    "xrevrange": lambda k: ("XREVRANGE", k, "+", "-", "COUNT", 1),
    "xrange": lambda k: ("XRANGE", k, "-", "+", "COUNT", 1),
    "xautoclaim": lambda k: ("XAUTOCLAIM", k, GROUP, "c", 1000, "0-0", "COUNT", 1),
    "xpending": lambda k: ("XPENDING", k, GROUP),
    "xinfo|groups": lambda k: ("XINFO", "GROUPS", k),
    "xinfo|stream": lambda k: ("XINFO", "STREAM", k),
    "xlen": lambda k: ("XLEN", k),
    "xack": lambda k: ("XACK", k, GROUP, "0-1"),
    "xdel": lambda k: ("XDEL", k, "0-1"),
    "xtrim": lambda k: ("XTRIM", k, "MAXLEN", 1000),
    "xsetid": lambda k: ("XSETID", k, "9999999999999-0"),
    "exists": lambda k: ("EXISTS", k),
    "del": lambda k: ("DEL", k),
    "expire": lambda k: ("EXPIRE", k, 600),
    "pexpire": lambda k: ("PEXPIRE", k, 600_000),
    "pttl": lambda k: ("PTTL", k),
    "get": lambda k: ("GET", k),
    "set": lambda k: ("SET", k, "1", "PX", 60_000),
    "incr": lambda k: ("INCR", k),
    "incrby": lambda k: ("INCRBY", k, 1),
    "decrby": lambda k: ("DECRBY", k, 1),
    "hget": lambda k: ("HGET", k, "f"),
    "hmget": lambda k: ("HMGET", k, "f", "g"),
    "hgetall": lambda k: ("HGETALL", k),
    "hset": lambda k: ("HSET", k, "f", "1"),
    "hdel": lambda k: ("HDEL", k, "f"),
    "hincrby": lambda k: ("HINCRBY", k, "f", 1),
    "sadd": lambda k: ("SADD", k, "p:1"),
    "srem": lambda k: ("SREM", k, "p:1"),
    "sismember": lambda k: ("SISMEMBER", k, "p:1"),
    "smismember": lambda k: ("SMISMEMBER", k, "p:1", "p:2"),
    "spop": lambda k: ("SPOP", k, 10),
    "zadd": lambda k: ("ZADD", k, 1, "m"),
    "zrem": lambda k: ("ZREM", k, "m"),
    "zcard": lambda k: ("ZCARD", k),
    "zrange": lambda k: ("ZRANGE", k, 0, 0, "WITHSCORES"),
    "zrangebyscore": lambda k: ("ZRANGEBYSCORE", k, "-inf", 1, "LIMIT", 0, 10),
    "zremrangebyscore": lambda k: ("ZREMRANGEBYSCORE", k, "-inf", 0),
    "zremrangebyrank": lambda k: ("ZREMRANGEBYRANK", k, 0, 0),
    "evalsha": lambda k: ("EVALSHA", _NO_SCRIPT, 1, k),
}
# Every command any service holds on some family: each is tried on every family of every user.
UNIVERSE = sorted({c for family in keyspace.FAMILIES for c in family.access_commands()})

# The pub/sub commands the keyspace grants on channels, on one channel. Asked with ACL DRYRUN
# (a SSUBSCRIBE run on a pooled connection would leave it subscribed).
CHANNEL_SHAPES: dict[str, Callable[[str], Command]] = {
    "spublish": lambda c: ("SPUBLISH", c, "x"),
    "ssubscribe": lambda c: ("SSUBSCRIBE", c),
    "sunsubscribe": lambda c: ("SUNSUBSCRIBE", c),
    "publish": lambda c: ("PUBLISH", c, "x"),
    "subscribe": lambda c: ("SUBSCRIBE", c),
}


def channel_allowed(user: str) -> list[Command]:
    """Every pub/sub command the keyspace grants `user`, on an example channel of each family."""
    return [
        CHANNEL_SHAPES[command](channel.example)
        for channel in keyspace.CHANNELS
        for command in channel.commands(user)
    ]


def channel_refused(user: str) -> list[Command]:
    """Every pub/sub command `user` does not hold on a channel family, tried there; and every
    one on a channel no family declares (but SUNSUBSCRIBE, which Redis lets a user that may run
    it run on any channel: leaving a channel gives nothing)."""
    return [
        *(
            shape(channel.example)
            for channel in keyspace.CHANNELS
            for command, shape in CHANNEL_SHAPES.items()
            if command not in channel.commands(user)
        ),
        *(shape("elsewhere") for c, shape in CHANNEL_SHAPES.items() if c != "sunsubscribe"),
    ]


def allowed(user: str) -> list[Command]:
    """Every command the keyspace grants `user`, on an example key of each family."""
    return [
        SHAPES[command](family.example)
        for family in keyspace.FAMILIES
        for command in family.commands(user)
    ]


def refused(user: str) -> list[Command]:
    """Every command some service holds that `user` does not hold on a family, tried there."""
    return [
        SHAPES[command](family.example)
        for family in keyspace.FAMILIES
        for command in UNIVERSE
        if command not in family.commands(user)
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


@pytest_asyncio.fixture
async def users(env: Env) -> AsyncIterator[dict[str, redis.Redis]]:
    """Each service's client, as its own Redis user, on a test database seeded afresh."""
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
                await admin.xadd(feed, {keyspace.WAKE_FEED_FIELD: str(n)})
        else:
            await writer.publish({feed: [FeedEvent(b"1"), FeedEvent(b"2")]})


async def intact(admin: redis.Redis) -> dict[str, object]:
    """What an erasure would have changed: each stream's length, group and last id, each
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
