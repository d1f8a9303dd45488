"""The inbox's keys: the message streams and everything beside them, under each shard's hash tag
{m<shard>} (a script or MULTI of one shard stays on one node), and ingest's kept responses."""

from __future__ import annotations

from services.keyspace.family import FAILURES_SUFFIX, Family, RedisType

PREFIX = "agora:msg"
_SHARD = "one slot per shard ({m<shard>}): the append and ack scripts touch all of a shard's keys"

EVENTS = Family(
    "message stream",
    "{prefix}:{{m{shard}}}:events",
    PREFIX,
    RedisType.STREAM,
    owner="ingest",
    access={
        "ingest": "xadd evalsha",
        "flusher": "xgroup|create xreadgroup xread xrevrange xautoclaim xpending xinfo|groups"
        " xlen xack xdel evalsha",
    },
    tag=_SHARD,
    ttl="none: the flusher XDELs what it stored",
    bound="MESSAGE_QUEUE_MAX / MESSAGE_QUEUE_MAX_BYTES over the shards, refused by ingest",
    bytes_each=64 * 1024 * 1024,
    per="shard (at its backlog bound)",
)
FAILURES = Family(
    "message stream failure counts",
    "{prefix}:{{m{shard}}}:events" + FAILURES_SUFFIX,
    PREFIX,
    RedisType.HASH,
    owner="flusher",
    access={"flusher": "exists hincrby hdel pexpire evalsha"},
    tag=_SHARD,
    ttl="a day after the last failure",
    bound="one field per pending entry that failed (the backlog bound)",
    bytes_each=4 * 1024,
    per="shard",
)
DEAD = Family(
    "message dead letters",
    "{prefix}:{{m{shard}}}:dead",
    PREFIX,
    RedisType.STREAM,
    owner="flusher",
    access={"flusher": "xadd xlen xrange evalsha"},
    tag=_SHARD,
    ttl="none: an operator replays or drops them",
    bound="XADD MAXLEN ~ DEAD_LETTER_MAX_ENTRIES",
    bytes_each=1024 * 1024,
    per="shard",
)
BACKLOG = Family(
    "message backlog (messages)",
    "{prefix}:{{m{shard}}}:backlog",
    PREFIX,
    RedisType.STRING,
    owner="ingest",
    access={"ingest": "get incrby evalsha", "flusher": "get decrby evalsha"},
    tag=_SHARD,
    ttl="none",
    bound="one counter per shard",
    bytes_each=80,
    per="shard",
)
BACKLOG_BYTES = Family(
    "message backlog (bytes)",
    "{prefix}:{{m{shard}}}:backlog-bytes",
    PREFIX,
    RedisType.STRING,
    owner="ingest",
    access={"ingest": "get incrby evalsha", "flusher": "get decrby evalsha"},
    tag=_SHARD,
    ttl="none",
    bound="one counter per shard",
    bytes_each=80,
    per="shard",
)
RESERVED = Family(
    "message backlog reservations",
    "{prefix}:{{m{shard}}}:backlog-reserved",
    PREFIX,
    RedisType.HASH,
    owner="ingest",
    access={"ingest": "hgetall hset hdel evalsha"},
    tag=_SHARD,
    ttl="each field carries its own expiry, dropped when read past it",
    bound="one field per ingest call in flight across shards (Redis Cluster only)",
    bytes_each=2 * 1024,
    per="shard",
)
RATES = Family(
    "message shard rates",
    "{prefix}:{{m{shard}}}:backlog-rates",
    PREFIX,
    RedisType.STRING,
    owner="ingest",
    access={"ingest": "get set evalsha"},
    tag=_SHARD,
    ttl="four MESSAGE_QUEUE_RATE_HALF_LIFE_SECONDS after the shard's last append",
    bound="one per shard",
    bytes_each=100,
    per="shard",
)
ACCOUNT_RATE = Family(
    "message account rates",
    "{prefix}:{{m{shard}}}:backlog-rate:{account}",
    PREFIX,
    RedisType.STRING,
    owner="ingest",
    access={"ingest": "get set evalsha"},
    tag=_SHARD,
    ttl="four MESSAGE_QUEUE_RATE_HALF_LIFE_SECONDS after the account's last append",
    bound="one per account active within the TTL",
    bytes_each=100,
    per="active account",
)
LEASE = Family(
    "message shard lease",
    "{prefix}:{{m{shard}}}:lease",
    PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": "get set pexpire del evalsha"},
    tag=_SHARD,
    ttl="FLUSHER_LEASE_TTL_MS, renewed by its holder",
    bound="one per shard",
    bytes_each=100,
    per="shard",
)
LEASE_EPOCH = Family(
    "message shard lease epoch",
    "{prefix}:{{m{shard}}}:lease:epoch",
    PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": "get set incr evalsha"},
    tag=_SHARD,
    ttl="none: an epoch never goes back",
    bound="one per shard",
    bytes_each=80,
    per="shard",
)
LEASE_MEMBERS = Family(
    "message flusher members",
    "{prefix}:lease-members",
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
IDEMPOTENCY = Family(
    "kept responses",
    "{prefix}:idempotency:{account}:{digest}",
    PREFIX,
    RedisType.STRING,
    owner="ingest",
    access={"ingest": "set get del evalsha"},
    tag="none: each key alone in its slot",
    ttl="the idempotency key's lifetime (24 h), 30 s while its call runs",
    bound="one per keyed call within 24 h (the rate limits bound the calls)",
    bytes_each=300,
    per="keyed call in 24 h",
    example_parts={"digest": "ab"},
)

FAMILIES = (
    EVENTS,
    FAILURES,
    DEAD,
    BACKLOG,
    BACKLOG_BYTES,
    RESERVED,
    RATES,
    ACCOUNT_RATE,
    LEASE,
    LEASE_EPOCH,
    LEASE_MEMBERS,
    IDEMPOTENCY,
)
