"""Every Redis key the services use, declared once (docs/architecture.md, "The Redis keyspace").

The families are data, in keyspace.toml beside this module: each one's template and hash tag,
its Redis type, its owner, the commands each service runs on it, its TTL and its memory bound.
A key is only ever built through its family (`family("likes.liked").key(...)`, or the layouts
that call it: MessageStreams, LikeStreams, LikeCache, LiveFeeds); the Redis users' ACLs
(tools/redis_acl.py), the capacity report (tools/redis_capacity.py) and the architecture
document's table (tools/keyspace_doc.py) are derived from the same declarations, and
tests/deploy/test_redis_acl.py tries every grant and every refusal they imply. The pub/sub
channels are declared beside them (`channel("channels.presence")`), their grants derived the
same way.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

from services.keyspace.family import Channel, Family, RedisType

SERVICES = ("ingest", "likes", "flusher", "timeline", "gateway")
# A feed's keys beside its stream, all in its slot: its epoch and where it stands; the newest
# version of each object an entry carries; when each version was recorded.
FEED_SUFFIXES = (":meta", ":versions", ":versions-at")
# Beside each stream its consumers count every pending entry's failed attempts, in its slot.
FAILURES_SUFFIX = ":failures"
# A wake entry's one field: the key of the feed that has something new.
WAKE_FEED_FIELD = "k"


def _load() -> tuple[dict[str, str], dict[str, int], tuple[Family, ...], tuple[Channel, ...]]:
    declared = tomllib.loads((Path(__file__).parent / "keyspace.toml").read_text())
    prefixes: dict[str, str] = declared.pop("prefixes")
    scale: dict[str, int] = declared.pop("design_scale")
    channels = tuple(
        _channel(f"channels.{name}", spec, prefixes)
        for name, spec in declared.pop("channels", {}).items()
    )
    families = []
    for group, members in declared.items():
        for name, spec in members.items():
            families.append(_family(f"{group}.{name}", spec, prefixes))
    return prefixes, scale, tuple(families), channels


def _channel(ident: str, spec: dict[str, Any], prefixes: dict[str, str]) -> Channel:
    return Channel(
        id=ident,
        name=spec["name"],
        template=spec["template"],
        default_prefix=prefixes[spec["prefix"]],
        tag=spec["tag"],
        bound=spec["bound"],
        access=dict(spec["access"]),
    )


def _family(ident: str, spec: dict[str, Any], prefixes: dict[str, str]) -> Family:
    return Family(
        id=ident,
        name=spec["name"],
        template=spec["template"],
        default_prefix=prefixes[spec["prefix"]],
        type=RedisType(spec["type"]),
        owner=spec["owner"],
        access=dict(spec["access"]),
        tag=spec["tag"],
        ttl=spec["ttl"],
        bound=spec["bound"],
        bytes_each=spec["bytes_each"],
        per=spec["per"],
        example_parts=dict(spec.get("example", {})),
    )


# The prefix of each group of families (PREFIXES["messages"]); how many of each `per` a
# deployment at the design's scale has (100,000 Zalo accounts; 50,000 students in 2,000 courses,
# about 6 each); every family; every pub/sub channel family.
PREFIXES, DESIGN_SCALE, FAMILIES, CHANNELS = _load()
_BY_ID = {f.id: f for f in FAMILIES}
_CHANNELS_BY_ID = {c.id: c for c in CHANNELS}


def family(ident: str) -> Family:
    """The family declared as `ident` ("messages.events")."""
    try:
        return _BY_ID[ident]
    except KeyError:
        raise KeyError(
            f"no Redis key family {ident!r} in services/keyspace/keyspace.toml"
        ) from None


def channel(ident: str) -> Channel:
    """The channel family declared as `ident` ("channels.presence")."""
    try:
        return _CHANNELS_BY_ID[ident]
    except KeyError:
        raise KeyError(f"no pub/sub channel {ident!r} in services/keyspace/keyspace.toml") from None


def family_of(key: str) -> Family | None:
    """The family a key belongs to (its pattern matches), if any."""
    for candidate in FAMILIES:
        if fnmatch.fnmatchcase(key, candidate.pattern.replace("[", "[[]")):
            return candidate
    return None


def failures_beside(stream: str) -> str:
    """Where the consumers of `stream` count its entries' failed attempts."""
    return stream + FAILURES_SUFFIX


def feed_keys(feed: str) -> list[str]:
    """A feed's keys, all in its slot: its stream, meta, versions and their times."""
    return [feed, *(feed + suffix for suffix in FEED_SUFFIXES)]


__all__ = [
    "CHANNELS",
    "DESIGN_SCALE",
    "FAILURES_SUFFIX",
    "FAMILIES",
    "FEED_SUFFIXES",
    "PREFIXES",
    "SERVICES",
    "WAKE_FEED_FIELD",
    "Channel",
    "Family",
    "RedisType",
    "channel",
    "failures_beside",
    "family",
    "family_of",
    "feed_keys",
]
