"""The forum's like keys. Everything of one user lives under one hash tag {ls<shard>}, the shard
a hash of the user id: the user's liked SETs, last operations and direct-write guards, and the
like stream their toggles go to, so the toggle script touches one slot and the one consumer of
the shard keeps each user's order."""

from __future__ import annotations

from services.keyspace.family import FAILURES_SUFFIX, Family, RedisType

PREFIX = "forum"
_SHARD = (
    "one slot per like shard ({ls<shard>}): the toggle script writes the user's keys and the"
    " shard's stream together"
)
_USER = "{prefix}:{{ls{shard}}}:u:{user}:c:{course}"
# The user's keys: a cache the likes service fills from PostgreSQL and expires.
_USER_KEYS = (
    "exists get set del expire sadd srem sismember smismember hget hgetall hset hdel evalsha"
)

EVENTS = Family(
    "like stream",
    "{prefix}:{{ls{shard}}}:like-events",
    PREFIX,
    RedisType.STREAM,
    owner="likes",
    access={
        "likes": "xadd xlen evalsha",
        "flusher": "xgroup|create xreadgroup xread xrevrange xautoclaim xpending xinfo|groups"
        " xlen xack xdel evalsha",
    },
    tag=_SHARD,
    ttl="none: the flusher XDELs what it stored",
    bound="LIKE_QUEUE_MAX / LIKE_QUEUE_MAX_BYTES over the shards, refused by likes",
    bytes_each=32 * 1024 * 1024,
    per="like shard (at its backlog bound)",
)
BYTES = Family(
    "like backlog (bytes)",
    "{prefix}:{{ls{shard}}}:like-events:bytes",
    PREFIX,
    RedisType.STRING,
    owner="likes",
    access={"likes": "get incrby evalsha", "flusher": "get decrby evalsha"},
    tag=_SHARD,
    ttl="none",
    bound="one counter per shard",
    bytes_each=80,
    per="like shard",
)
FAILURES = Family(
    "like stream failure counts",
    "{prefix}:{{ls{shard}}}:like-events" + FAILURES_SUFFIX,
    PREFIX,
    RedisType.HASH,
    owner="flusher",
    access={"flusher": "exists hincrby hdel pexpire evalsha"},
    tag=_SHARD,
    ttl="a day after the last failure",
    bound="one field per pending entry that failed (the backlog bound)",
    bytes_each=4 * 1024,
    per="like shard",
)
DEAD = Family(
    "like dead letters",
    "{prefix}:{{ls{shard}}}:like-events:dead",
    PREFIX,
    RedisType.STREAM,
    owner="flusher",
    access={"flusher": "xadd xlen xrange evalsha"},
    tag=_SHARD,
    ttl="none: an operator replays or drops them",
    bound="XADD MAXLEN ~ DEAD_LETTER_MAX_ENTRIES",
    bytes_each=1024 * 1024,
    per="like shard",
)
LEASE = Family(
    "like shard lease",
    "{prefix}:{{ls{shard}}}:lease",
    PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": "get set pexpire del evalsha"},
    tag=_SHARD,
    ttl="FLUSHER_LEASE_TTL_MS, renewed by its holder",
    bound="one per shard",
    bytes_each=100,
    per="like shard",
)
LEASE_EPOCH = Family(
    "like shard lease epoch",
    "{prefix}:{{ls{shard}}}:lease:epoch",
    PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": "get set incr evalsha"},
    tag=_SHARD,
    ttl="none: an epoch never goes back",
    bound="one per shard",
    bytes_each=80,
    per="like shard",
)
LEASE_MEMBERS = Family(
    "like flusher members",
    "{prefix}:like-lease-members",
    PREFIX,
    RedisType.ZSET,
    owner="flusher",
    access={"flusher": "zadd zremrangebyscore zcard zrem evalsha"},
    tag="none: one key",
    ttl="members older than the lease TTL are removed by each heartbeat",
    bound="one member per flusher replica",
    bytes_each=200,
    per="deployment",
)
LIKED = Family(
    "liked SETs",
    f"{_USER}:liked",
    PREFIX,
    RedisType.SET,
    owner="likes",
    access={"likes": _USER_KEYS},
    tag=_SHARD,
    ttl="LIKED_SET_TTL_SECONDS (7 days) after the user's last toggle; refilled from PostgreSQL",
    bound="one per student and course liked in within the TTL; members p:<id> / c:<id>",
    bytes_each=600,
    per="student-course",
)
LAST_OPS = Family(
    "last like operations",
    f"{_USER}:ops",
    PREFIX,
    RedisType.HASH,
    owner="likes",
    access={"likes": _USER_KEYS, "flusher": "hget hset hdel evalsha"},
    tag=_SHARD,
    ttl="as the liked SET; the flusher deletes each field once its entry is stored",
    bound="one field per unflushed toggle (the like backlog bound)",
    bytes_each=200,
    per="student-course",
)
DIRECT_GUARD = Family(
    "direct-write guards",
    f"{_USER}:direct",
    PREFIX,
    RedisType.STRING,
    owner="likes",
    access={"likes": _USER_KEYS},
    tag=_SHARD,
    ttl="LIKE_PENDING_WAIT while busy, the liked SET's TTL after",
    bound="one per student and course written by a sync or counterless pod",
    bytes_each=120,
    per="student-course",
)
ACCESS_VERSION = Family(
    "course access versions",
    "{prefix}:{{c{course}}}:access-version",
    PREFIX,
    RedisType.STRING,
    owner="likes",
    access={"likes": "get set evalsha", "ingest": "del evalsha"},
    tag="one key per course, alone in its slot",
    ttl="a day (ACCESS_VERSION_TTL_SECONDS); deleted when the course's access changes",
    bound="one per course liked in within a day",
    bytes_each=100,
    per="course",
)
DIRTY = Family(
    "dirty like counters",
    "{prefix}:{{dirty}}:{kind}s",
    PREFIX,
    RedisType.SET,
    owner="flusher",
    access={"likes": "sadd evalsha", "flusher": "sadd spop evalsha"},
    tag="one slot for both kinds ({dirty}): one script marks posts and comments",
    ttl="none: the reconciler SPOPs them",
    bound="one member per target whose counter a flush changed since the last reconcile",
    bytes_each=64 * 1024,
    per="target kind",
    example_parts={"kind": "post"},
)

FAMILIES = (
    EVENTS,
    BYTES,
    FAILURES,
    DEAD,
    LEASE,
    LEASE_EPOCH,
    LEASE_MEMBERS,
    LIKED,
    LAST_OPS,
    DIRECT_GUARD,
    ACCESS_VERSION,
    DIRTY,
)
