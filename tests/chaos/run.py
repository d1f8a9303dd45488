"""One scenario: stack up, load, fault, heal, drain, then account like Jepsen does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from dataclasses import dataclass

import asyncpg
import redis.asyncio as redis

from services.runtime.mysql import MysqlDatabase
from tests.chaos.faults import FAULTS
from tests.chaos.load import CHAOS_ACCOUNT, CHAOS_COURSE, Load
from tests.chaos.stack import SHARDS, ChaosStack

USERS = list(range(60_000, 62_000))


@dataclass(frozen=True)
class Outcome:
    fault: str
    sent: int
    acknowledged: int
    stored: int
    lost: int
    duplicates: int
    unexpected: int
    out_of_order: int
    likes_acknowledged: int
    likes_stored: int
    likes_lost: int
    likes_unexpected: int
    counter_drift: int
    pending: int
    dead_letters: int
    crashed: list[str]
    message_gap_s: float
    like_gap_s: float
    drained_s: float | None
    errors: dict[str, int]
    error_samples: dict[str, str]
    extra: dict[str, float]

    @property
    def clean(self) -> bool:
        return (
            self.lost == self.duplicates == self.unexpected == self.out_of_order == 0
            and self.likes_lost == self.likes_unexpected == self.counter_drift == 0
            and self.pending == 0
            and self.drained_s is not None
            and not self.crashed
        )


def _urls() -> tuple[str, str]:
    e = os.environ
    mysql = (
        f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}"
        "/agora_test"
    )
    pg = (
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
        "/agora_test"
    )
    return mysql, pg


async def prepare() -> list[int]:
    """The chaos account, the chaos course with 2,000 students, and three fresh posts."""
    mysql_url, pg_url = _urls()
    db = await MysqlDatabase.connect(mysql_url)
    try:
        await db.execute(
            "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, 'chaos')"
            " ON DUPLICATE KEY UPDATE id = id",
            (CHAOS_ACCOUNT,),
        )
    finally:
        await db.close()
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute(
            "INSERT INTO courses (id, title) VALUES ($1, 'chaos') ON CONFLICT DO NOTHING",
            CHAOS_COURSE,
        )
        await conn.execute(
            "INSERT INTO course_members (course_id, user_id)"
            " SELECT $1, u FROM unnest($2::bigint[]) u ON CONFLICT DO NOTHING",
            CHAOS_COURSE,
            USERS,
        )
        rows = await conn.fetch(
            "INSERT INTO posts (course_id, user_id, title, body)"
            " SELECT $1, 1, 'chaos', 'chaos' FROM generate_series(1, 3) RETURNING id",
            CHAOS_COURSE,
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def account(load: Load, posts: list[int], stack: ChaosStack) -> dict[str, int]:
    mysql_url, pg_url = _urls()
    db = await MysqlDatabase.connect(mysql_url)
    try:
        rows = await db.fetchall(
            "SELECT msg_id, thread_id, id FROM zalo_messages"
            " WHERE zalo_account_id = %s AND msg_id LIKE %s ORDER BY id",
            (CHAOS_ACCOUNT, f"{load.prefix}-%"),
        )
    finally:
        await db.close()
    stored_ids = [r[0] for r in rows]
    # Per conversation, the flusher must have stored messages in the order they were sent.
    last_seq: dict[str, int] = {}
    out_of_order = 0
    for msg_id, thread, _ in rows:
        seq = int(msg_id.rsplit("-", 1)[1])
        if seq < last_seq.get(thread, -1):
            out_of_order += 1
        last_seq[thread] = seq
    conn = await asyncpg.connect(pg_url)
    try:
        like_rows = await conn.fetch(
            "SELECT user_id, post_id FROM post_likes WHERE post_id = ANY($1::bigint[])", posts
        )
        drift = await conn.fetchval(
            "SELECT count(*) FROM posts p WHERE p.id = ANY($1::bigint[]) AND p.like_count <>"
            " (SELECT count(*) FROM post_likes l WHERE l.post_id = p.id)",
            posts,
        )
    finally:
        await conn.close()
    likes = {(r[0], r[1]) for r in like_rows}
    client = stack.client()
    try:
        pending = 0
        streams = [f"agora:msg:{s}" for s in range(SHARDS)]
        streams += [f"forum:{{ls{s}}}:like-events" for s in range(SHARDS)]
        for stream, group in [(s, "flusher") for s in streams[:SHARDS]] + [
            (s, "like-flusher") for s in streams[SHARDS:]
        ]:
            with contextlib.suppress(redis.ResponseError):  # no group: nothing was ever read
                pending += int((await client.xpending(stream, group))["pending"])
        dead = int(await client.xlen("agora:msg:dead")) + int(
            await client.xlen("forum:like-events:dead")
        )
    finally:
        await client.aclose()
    stored = set(stored_ids)
    return {
        "stored": len(stored),
        "duplicates": len(stored_ids) - len(stored),
        "lost": len(load.ledger.acked - stored),
        "unexpected": len(stored - load.ledger.sent),
        "out_of_order": out_of_order,
        "likes_stored": len(likes),
        "likes_lost": len(load.ledger.like_acked - likes),
        "likes_unexpected": len(likes - load.ledger.like_sent),
        "counter_drift": int(drift),
        "pending": pending,
        "dead_letters": dead,
    }


async def run_scenario(
    fault_name: str, *, aof: bool = True, before: float = 2.0, after: float = 3.0
) -> Outcome:
    posts = await prepare()
    queue_max = 4_000 if fault_name.startswith("flusher stopped") else 50_000
    stack = ChaosStack(aof=aof, queue_max=queue_max)
    await stack.start()
    try:
        load = Load(
            f"127.0.0.1:{stack.services['ingest'].port}",
            f"127.0.0.1:{stack.services['likes'].port}",
            f"c{uuid.uuid4().hex[:8]}",
            posts,
            USERS,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(load.run(stop))
        await asyncio.sleep(before)
        injected = time.monotonic()
        extra = await FAULTS[fault_name](stack)
        await asyncio.sleep(after)
        stop.set()
        await task
        # Recovery: the longest stretch without an acknowledgement, from the fault on.
        gaps = {
            path: _longest_gap(times, injected)
            for path, times in (
                ("messages", load.ledger.message_ack_times),
                ("likes", load.ledger.like_ack_times),
            )
        }
        drained = await stack.drained()
        counts = await account(load, posts, stack)
        # Nothing restarts a service here but the faults: one that died on its own is a bug.
        crashed = [
            name
            for name, svc in stack.services.items()
            if svc.proc is None or svc.proc.returncode is not None
        ]
    finally:
        await stack.stop()
    return Outcome(
        fault=fault_name + ("" if aof else " — NEGATIVE CONTROL: AOF off"),
        sent=len(load.ledger.sent),
        acknowledged=len(load.ledger.acked),
        likes_acknowledged=len(load.ledger.like_acked),
        message_gap_s=gaps["messages"],
        like_gap_s=gaps["likes"],
        drained_s=drained,
        errors=dict(load.ledger.errors),
        error_samples=dict(load.ledger.error_samples),
        extra=extra,
        crashed=crashed,
        **counts,
    )


def _longest_gap(times: list[float], since: float) -> float:
    after = sorted(t for t in times if t >= since)
    return max((b - a for a, b in zip([since, *after], after, strict=False)), default=float("nan"))


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| fault | msgs sent | acked | stored | lost | dup | unexpected | out of order |"
        " likes acked | stored | lost | counter drift | pending | dead letters |"
        " longest ack gap msgs / likes | drained in | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        verdict = "0 lost, 0 dup, 0 drift" if o.clean else "**FAILED: data lost or wrong**"
        if o.crashed:
            verdict += f" — crashed: {', '.join(o.crashed)}"
        notes = ", ".join(f"{k}={v:,.0f}" for k, v in o.extra.items())
        if notes:
            verdict += f" ({notes})"
        drained = f"{o.drained_s:.1f} s" if o.drained_s is not None else "never"
        lines.append(
            f"| {o.fault} | {o.sent:,} | {o.acknowledged:,} | {o.stored:,} | {o.lost} |"
            f" {o.duplicates} | {o.unexpected} | {o.out_of_order} | {o.likes_acknowledged:,} |"
            f" {o.likes_stored:,} | {o.likes_lost} | {o.counter_drift} | {o.pending} |"
            f" {o.dead_letters} | {o.message_gap_s:.2f} s / {o.like_gap_s:.2f} s | {drained} |"
            f" {verdict} |"
        )
    return "\n".join(lines)
