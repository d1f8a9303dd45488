"""Keys that coordinate replicas rather than carry data: the gateway's rate-limit logs and its
users' open event streams, the flusher's prune queue and its periodic jobs' periods and locks."""

from __future__ import annotations

from services.keyspace.family import Family, RedisType

RATE_LIMIT_PREFIX = "agora:ratelimit"
LIVE_STREAMS_PREFIX = "agora:live-streams"
PRUNE_PREFIX = "agora:prune"
JOBS_PREFIX = "agora:jobs"
# A redis-py Lock: SET NX PX, released and extended by its own scripts.
_LOCK = "get set del pexpire pttl evalsha"

RATE_LIMIT = Family(
    "rate-limit logs",
    "{prefix}:{limit}:{subject}",
    RATE_LIMIT_PREFIX,
    RedisType.ZSET,
    owner="gateway",
    access={"gateway": "zremrangebyscore zcard zadd zrange pexpire evalsha"},
    tag="none: each key alone (one script call per key)",
    ttl="the limit's window (60 s) after the subject's last hit",
    bound="one per subject active within the window, at most its limit of members",
    bytes_each=2 * 1024,
    per="active user and limit",
    example_parts={"limit": "like"},
)
LIVE_STREAMS = Family(
    "open event streams",
    "{prefix}:{user}",
    LIVE_STREAMS_PREFIX,
    RedisType.ZSET,
    owner="gateway",
    access={"gateway": "zremrangebyscore zcard zadd zrange zrem pexpire evalsha"},
    tag="none: each user's key alone",
    ttl="a lease (90 s), renewed while the stream is open",
    bound="LIVE_STREAMS_PER_USER members per user",
    bytes_each=300,
    per="watching user",
)
PRUNE_QUEUE = Family(
    "prune queue",
    "{prefix}:{{prune}}:{state}",
    PRUNE_PREFIX,
    RedisType.ZSET,
    owner="flusher",
    access={"flusher": "zadd zrem zrangebyscore zcard evalsha"},
    tag="one slot ({prune}): the claim script moves members from due to running",
    ttl="none: a member leaves once its conversation is pruned",
    bound="one member per conversation over its cap and not pruned yet",
    bytes_each=64 * 1024,
    per="queue state",
    example_parts={"state": "due"},
)
PRUNE_LOCK = Family(
    "prune locks",
    "{prefix}:lock:{conversation}",
    PRUNE_PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": _LOCK},
    tag="none",
    ttl="the prune's lease",
    bound="one per conversation being pruned (PRUNE_CONCURRENCY per replica)",
    bytes_each=150,
    per="pruning conversation",
)
JOB_PERIOD = Family(
    "periodic job periods",
    "{prefix}:{job}:period",
    JOBS_PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": _LOCK},
    tag="none",
    ttl="the job's interval",
    bound="one per job",
    bytes_each=100,
    per="job",
    example_parts={"job": "capacity-sample"},
)
JOB_RUNNING = Family(
    "periodic job locks",
    "{prefix}:{job}:running",
    JOBS_PREFIX,
    RedisType.STRING,
    owner="flusher",
    access={"flusher": _LOCK},
    tag="none",
    ttl="the job's timeout",
    bound="one per job",
    bytes_each=150,
    per="job",
    example_parts={"job": "capacity-sample"},
)

FAMILIES = (RATE_LIMIT, LIVE_STREAMS, PRUNE_QUEUE, PRUNE_LOCK, JOB_PERIOD, JOB_RUNNING)
