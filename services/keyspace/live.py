"""The live change feeds' keys (docs/live.md). A feed is a stream under its own hash tag
({a<account>} / {f<course>}) with three small keys beside it in its slot, which one script reads
and writes together; the wake streams ({w<n>}) only name a feed that has something new."""

from __future__ import annotations

from services.keyspace.family import Family, RedisType

PREFIX = "live"
# The keys beside a feed, by suffix: its epoch and where it stands; the newest version of each
# object an entry carries; when each version was recorded (to forget the old ones).
META, VERSIONS, VERSIONS_AT = ":meta", ":versions", ":versions-at"
# A wake entry's one field: the feed's key.
WAKE_FEED_FIELD = "k"

# Writers add what they committed, trim by age, count and bytes, record superseding versions,
# begin a new epoch; the watcher (timeline) reads, and writes only a first epoch.
_WRITE_FEED = "xadd xrange xlen xtrim xsetid exists expire del evalsha"
_WRITE_SIDE = "hmget hget hset hdel zadd zrangebyscore zrem exists expire del evalsha"
_FEED_BOUND = (
    "LIVE_MAX_EVENTS_PER_FEED and LIVE_MAX_BYTES_PER_FEED of the newest entries, trimmed by"
    " every append; no append past LIVE_MEMORY_CEILING of the node's maxmemory"
)


def _feed(kind: str, template: str, writers: tuple[str, ...], tag: str) -> tuple[Family, ...]:
    """A feed family and the three beside it, which its writers and its watcher touch."""
    feed = Family(
        f"{kind} feeds",
        template,
        PREFIX,
        RedisType.STREAM,
        owner=writers[0],
        access={w: _WRITE_FEED for w in writers} | {"timeline": "exists xrange del evalsha"},
        tag=tag,
        ttl="twice LIVE_RETENTION_SECONDS after the last append",
        bound=_FEED_BOUND,
        bytes_each=600 * 1024,
        per="account" if kind == "inbox" else "course",
    )
    meta = Family(
        f"{kind} feed epochs",
        template + META,
        PREFIX,
        RedisType.HASH,
        owner=writers[0],
        access={w: _WRITE_SIDE for w in writers} | {"timeline": "hmget hset expire evalsha"},
        tag=tag,
        ttl="7 days after the feed's last write (EPOCH_KEPT_SECONDS)",
        bound="five small fields per feed",
        bytes_each=200,
        per=feed.per,
    )
    versions = [
        Family(
            f"{kind} feed {what}",
            template + suffix,
            PREFIX,
            type_,
            owner=writers[0],
            access={w: _WRITE_SIDE for w in writers} | {"timeline": timeline},
            tag=tag,
            ttl="as the feed",
            bound="one field per object superseded within the feed's retention",
            bytes_each=2 * 1024,
            per=feed.per,
        )
        for what, suffix, type_, timeline in (
            ("versions", VERSIONS, RedisType.HASH, "hget del evalsha"),
            ("version times", VERSIONS_AT, RedisType.ZSET, "del evalsha"),
        )
    ]
    return (feed, meta, *versions)


INBOX, INBOX_META, INBOX_VERSIONS, INBOX_VERSIONS_AT = _feed(
    "inbox",
    "{prefix}:{{a{account}}}:inbox",
    ("flusher",),
    "one slot per account ({a<account>}): the feed and the keys beside it",
)
COURSE, COURSE_META, COURSE_VERSIONS, COURSE_VERSIONS_AT = _feed(
    "course",
    "{prefix}:{{f{course}}}:course",
    ("flusher", "ingest", "likes"),
    "one slot per course ({f<course>}): the feed and the keys beside it",
)
WAKE = Family(
    "wake streams",
    "{prefix}:{{w{shard}}}:wake",
    PREFIX,
    RedisType.STREAM,
    owner="timeline",
    access={
        "flusher": "xadd evalsha",
        "ingest": "xadd evalsha",
        "likes": "xadd evalsha",
        "timeline": "exists xinfo|stream xread",
    },
    tag="one slot per wake shard ({w<n>})",
    ttl="none",
    bound="XADD MAXLEN ~ 10,000 (WAKE_MAXLEN)",
    bytes_each=700 * 1024,
    per="wake shard",
)

FAMILIES = (
    INBOX,
    INBOX_META,
    INBOX_VERSIONS,
    INBOX_VERSIONS_AT,
    COURSE,
    COURSE_META,
    COURSE_VERSIONS,
    COURSE_VERSIONS_AT,
    WAKE,
)


def feed_keys(feed: str) -> list[str]:
    """A feed's keys, all in its slot: its stream, meta, versions and their times."""
    return [feed, feed + META, feed + VERSIONS, feed + VERSIONS_AT]
