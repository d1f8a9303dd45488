"""Redis memory per key family (services/keyspace), for `make capacity`: how many keys of each
family this Redis holds and what they take now (MEMORY USAGE of a sample), and what the family
takes at the design's scale (keyspace.DESIGN_SCALE × the size its declaration gives a key there:
a stream at its backlog bound, a feed at the design's load). What a test or dev stack holds says
little about a deployment, so it is shown, not projected; the liked SETs, the one family whose
size per key depends on its users, are measured on scratch SETs of a typical and a busy
student."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as redis

from services import keyspace
from services.keyspace import Family

_SCRATCH = "capacity-scratch"
_SAMPLE = 20
_SCANNED_AT_MOST = 200_000
# Likes a student keeps in one course's SET within its TTL (a week): typical, and busy.
LIKES_PER_SET = (20, 200)


@dataclass(frozen=True)
class FamilyMemory:
    family: Family
    found: int
    measured: float | None  # bytes per key, from a sample of what this Redis holds

    # Bytes a key takes at the design's scale: declared, or measured (the liked SETs).
    per_key: float

    @property
    def projected(self) -> float:
        return self.per_key * keyspace.DESIGN_SCALE[self.family.per]


async def _usage(client: redis.Redis, key: bytes | str) -> int:
    return int(await client.memory_usage(key, samples=0) or 0)


async def measure(client: redis.Redis, family: Family) -> FamilyMemory:
    found, sizes = 0, list[int]()
    async for key in client.scan_iter(match=family.glob(), count=1000):
        if keyspace.family_of(key.decode()) is not family:
            continue  # a wider glob's neighbour
        found += 1
        if len(sizes) < _SAMPLE:
            sizes.append(await _usage(client, key))
        if found >= _SCANNED_AT_MOST:
            break
    measured = sum(sizes) / len(sizes) if sizes else None
    return FamilyMemory(family, found, measured, float(family.bytes_each))


async def liked_set_sizes(client: redis.Redis) -> dict[int, int]:
    """MEMORY USAGE of a liked SET of each size in LIKES_PER_SET (members p:<id> / c:<id>)."""
    sizes = {}
    for likes in LIKES_PER_SET:
        key = keyspace.family("likes.liked").key(_SCRATCH, shard=0, user=123_456, course=likes)
        members = [f"{'pc'[n % 2]}:{1_000_000 + n * 37}" for n in range(likes)]
        try:
            await client.sadd(key, *members)
            sizes[likes] = await _usage(client, key)
        finally:
            await client.delete(key)
    return sizes


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


async def keyspace_report(client: redis.Redis) -> str:
    rows = [await measure(client, family) for family in keyspace.FAMILIES]
    liked = await liked_set_sizes(client)
    typical = keyspace.family("likes.liked")
    rows = [
        FamilyMemory(r.family, r.found, r.measured, float(liked[LIKES_PER_SET[0]]))
        if r.family is typical
        else r
        for r in rows
    ]
    lines = [
        "Redis memory per key family (services/keyspace; docs/architecture.md):",
        f"  {'family':<32} {'keys here':>9} {'B/key here':>10} {'B/key at scale':>14}"
        f" {'at design scale':>16}",
    ]
    for r in rows:
        here = f"{r.measured:,.0f}" if r.measured is not None else "–"
        scale = keyspace.DESIGN_SCALE[r.family.per]
        lines.append(
            f"  {r.family.name:<32} {r.found:>9,} {here:>10} {r.per_key:>14,.0f}"
            f" {human(r.projected):>16}  ({scale:,} × {r.family.per})"
        )
    total = sum(r.projected for r in rows)
    sets = keyspace.DESIGN_SCALE[typical.per]
    few, many = (liked[n] for n in LIKES_PER_SET)
    lines += [
        f"  total at design scale: {human(total)} (streams at their backlog bounds)",
        f"  liked SETs: {few:,} B with {LIKES_PER_SET[0]} likes, {many:,} B with"
        f" {LIKES_PER_SET[1]}: 50,000 students × 6 courses = {sets:,} SETs →"
        f" {human(few * sets)} typical, {human(many * sets)} if every student were busy",
    ]
    return "\n".join(lines)
