"""Every Redis key the services use, declared once (docs/architecture.md, "The Redis keyspace").

A key is only ever built through its family here (`family.key(...)`, or the layouts that call
them: MessageStreams, LikeStreams, LiveFeeds), so its spelling, its hash tag, its owner and
readers, its TTL and its memory bound sit in one place; the Redis users' ACLs
(tools/redis_acl.py) and the capacity report (tools/capacity.py) are derived from the same
declarations, and tests/deploy/test_redis_acl.py tries every grant and every refusal they imply.
"""

from __future__ import annotations

import fnmatch

from services.keyspace import coordination, likes, live, messages
from services.keyspace.family import FAILURES_SUFFIX, Family, RedisType

FAMILIES: tuple[Family, ...] = (
    *messages.FAMILIES,
    *likes.FAMILIES,
    *live.FAMILIES,
    *coordination.FAMILIES,
)
SERVICES = ("ingest", "likes", "flusher", "timeline", "gateway")

# How many of each `per` a deployment at the design's scale has: 100,000 Zalo accounts on 8
# message shards; 50,000 students in 2,000 courses, each in about 6 (300,000 student-course
# pairs) on 4 like shards; peak 200 likes a second. The capacity report multiplies by these.
DESIGN_SCALE: dict[str, int] = {
    "shard": 8,
    "shard (at its backlog bound)": 8,
    "like shard": 4,
    "like shard (at its backlog bound)": 4,
    "deployment": 1,
    "account": 100_000,
    "active account": 100_000,
    "keyed call in 24 h": 1_000_000,
    "student-course": 300_000,
    "course": 2_000,
    "target kind": 2,
    "wake shard": 8,
    "active user and limit": 50_000,
    "watching user": 50_000,
    "queue state": 2,
    "pruning conversation": 8,
    "job": 4,
}


def failures_beside(stream: str) -> str:
    """Where the consumers of `stream` count its entries' failed attempts."""
    return stream + FAILURES_SUFFIX


def family_of(key: str) -> Family | None:
    """The family a key belongs to (its pattern matches), if any."""
    for family in FAMILIES:
        if fnmatch.fnmatchcase(key, family.pattern.replace("[", "[[]")):
            return family
    return None


__all__ = [
    "DESIGN_SCALE",
    "FAMILIES",
    "SERVICES",
    "Family",
    "RedisType",
    "coordination",
    "failures_beside",
    "family_of",
    "likes",
    "live",
    "messages",
]
