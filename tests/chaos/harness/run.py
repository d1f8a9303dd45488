"""One scenario: stack up, load, fault, heal, drain, then account like Jepsen does."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from services.runtime.mysql import MysqlDatabase
from services.streams.like_cache import LikeCache, member
from services.streams.likes import POST
from tests.chaos.harness.faults import CLUSTER_FAILOVER, FAULTS
from tests.chaos.harness.faults.grants import ensure_grants
from tests.chaos.harness.faults.outbound import NEGATIVE, SENT_ONCE, ignoring_possibly_sent
from tests.chaos.harness.faults.scenario import Fault, Scenario
from tests.chaos.harness.load import (
    CHAOS_ACCOUNT,
    CHAOS_COURSE,
    Ledger,
    Load,
    PairHistory,
    enrol,
)
from tests.chaos.harness.local_stack import mysql_admin_url, pg_admin_url
from tests.chaos.harness.shards import LIKE_STREAMS, MESSAGE_STREAMS
from tests.chaos.harness.sql_failover import FAILOVERS, PG_LEADER_LOST, lose_pg_leader_async
from tests.chaos.harness.stack import ChaosStack

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
    # Likes are accounted per (user, post) by their final state: the last acknowledged toggle
    # decides it (a pair whose last toggle was never acknowledged may end either way).
    likes_acknowledged: int  # toggles acknowledged
    like_pairs: int  # (user, post) pairs toggled
    likes_stored: int  # post_likes rows of the run's posts
    likes_lost: int  # last acknowledged toggle a like, no row (a subset of reordered)
    likes_reordered: int  # row present or not, against the last acknowledged toggle
    likes_redis_mismatch: int  # the user's liked SET (when it exists), against the same
    likes_unexpected: int  # rows of pairs nobody toggled
    redis_sets_missing: int  # users whose liked SET is gone (SMISMEMBER then answers "no")
    counter_drift: int
    # Forum comments (a scenario with forum writers): acknowledged, acknowledged but not stored,
    # stored more than once.
    forum_acknowledged: int
    forum_lost: int
    forum_duplicates: int
    pending: int
    dead_letters: int
    crashed: list[str]
    message_gap_s: float
    like_gap_s: float
    forum_gap_s: float
    drained_s: float | None
    errors: dict[str, int]
    error_samples: dict[str, str]
    extra: dict[str, float]
    log_dir: str = ""
    control: bool = False
    # Evidence for a report: the fault's timeline and samples of what went wrong.
    details: tuple[str, ...] = ()

    @property
    def problems(self) -> list[str]:
        """What went wrong, in words (empty: nothing)."""
        counts = [
            (self.lost, "messages lost"),
            (self.duplicates, "duplicates"),
            (self.unexpected, "unexpected messages"),
            (self.out_of_order, "out of order"),
            (self.likes_reordered, "likes reordered"),
            (self.likes_redis_mismatch, "Redis like mismatches"),
            (self.likes_unexpected, "unexpected likes"),
            (self.counter_drift, "counters drifted"),
            (self.forum_lost, "forum writes lost"),
            (self.forum_duplicates, "forum writes duplicated"),
            (self.pending, "pending"),
            # A batch applied by a flusher that had lost its shard: what fencing refuses.
            (int(self.extra.get("stale_likes_committed", 0)), "stale likes committed"),
            # One account's flood (tests/chaos/harness/noisy_account.py): what fair shares prevent.
            (int(self.extra.get("others_refused", 0)), "refusals of the other accounts"),
            (int(self.extra.get("others_p99_regressed", 0)), "others' ack p99 regressed"),
            # Replies through the listener (tests/chaos/harness/faults/outbound.py).
            (int(self.extra.get("replies_not_final", 0)), "replies never final"),
            (int(self.extra.get("replies_sent_twice", 0)), "replies sent twice"),
            (int(self.extra.get("replies_out_of_order", 0)), "conversations' replies reordered"),
            (int(self.extra.get("replies_stored_wrong", 0)), "replies not stored exactly once"),
            (int(self.extra.get("replies_msg_id_wrong", 0)), "replies with another msg_id"),
        ]
        found = [f"{n:,} {what}" for n, what in counts if n]
        if self.drained_s is None:
            found.append("never drained")
        if self.crashed:
            found.append(f"crashed: {', '.join(self.crashed)}")
        return found

    @property
    def clean(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Control:
    """A scenario with one protection switched off: the same accounting must see the damage (a
    check that cannot fail proves nothing)."""

    fault: str
    detects: Callable[[Outcome], bool]
    aof: bool = True
    fencing: bool = True
    # REDIS_WAIT_REPLICAS of ingest and likes, instead of the fault's.
    wait_replicas: int | None = None
    # The fault with its protection taken away inside it (a replication made asynchronous, say),
    # instead of the fault's own.
    inject: Fault | None = None


CONTROLS: dict[str, Control] = {
    "kill -9 Redis + restart (AOF, fsync always) — NEGATIVE CONTROL: AOF off": Control(
        "kill -9 Redis + restart (AOF, fsync always)",
        lambda o: o.lost > 0 or o.likes_reordered > 0,
        aof=False,
    ),
    # The damage is the frozen flusher's stale batch committing after the takeover; it shows as a
    # reordered like only when the random load toggled one of its pairs again inside the window
    # (most runs, not all), so either is the control seeing what fencing prevents.
    "flusher SIGSTOPped past its lease — NEGATIVE CONTROL: fencing off": Control(
        "flusher SIGSTOPped past its lease",
        lambda o: o.likes_reordered > 0 or o.extra.get("stale_likes_committed", 0) > 0,
        fencing=False,
    ),
    # The same failover, writes acknowledged once the master alone has them: what was
    # acknowledged while its replica was stopped dies with the master (messages the flusher had
    # not stored yet; likes whose last acknowledged toggle the promoted replica never saw).
    f"{CLUSTER_FAILOVER} — NEGATIVE CONTROL: no WAIT": Control(
        CLUSTER_FAILOVER,
        lambda o: o.lost > 0 or o.likes_reordered > 0 or o.likes_redis_mismatch > 0,
        wait_replicas=0,
    ),
    # The same machine lost with the standby asynchronous and its replication link cut a few
    # seconds before: the likes the flusher committed (and took off their stream) and the comments
    # acknowledged since then were on the lost machine alone.
    f"{PG_LEADER_LOST} — NEGATIVE CONTROL: asynchronous standby, link cut": Control(
        PG_LEADER_LOST,
        lambda o: o.likes_lost > 0 or o.forum_lost > 0,
        inject=lose_pg_leader_async,
    ),
    # The stand-in dies right after sending and, started again, sends the orders offered as
    # possibly sent without looking at its log: Zalo gets them twice, the accounting counts them.
    NEGATIVE: Control(
        SENT_ONCE,
        lambda o: o.extra.get("replies_sent_twice", 0) > 0,
        inject=ignoring_possibly_sent,
    ),
}
# The controls of the HA engines' failovers (python -m tests.chaos --ha; stack.sh run-ha).
HA_CONTROLS = (f"{PG_LEADER_LOST} — NEGATIVE CONTROL: asynchronous standby, link cut",)
# make test's controls (its 20-minute budget); make chaos runs every control: fencing off (make
# test shows it deterministically: tests/flusher/test_fencing.py) and the cluster failover's
# without WAIT too.
QUICK_CONTROLS = ("kill -9 Redis + restart (AOF, fsync always) — NEGATIVE CONTROL: AOF off",)


async def prepare() -> list[int]:
    """The chaos account, the chaos course with 2,000 students, and three fresh posts."""
    await ensure_grants()
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        await db.execute(
            "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, 'chaos')"
            " ON DUPLICATE KEY UPDATE id = id",
            (CHAOS_ACCOUNT,),
        )
    finally:
        await db.close()
    conn = await asyncpg.connect(pg_admin_url())
    try:
        await conn.execute(
            "INSERT INTO courses (id, title) VALUES ($1, 'chaos') ON CONFLICT DO NOTHING",
            CHAOS_COURSE,
        )
        await enrol(conn, USERS)
        rows = await conn.fetch(
            "INSERT INTO posts (course_id, user_id, title, body)"
            " SELECT $1, 1, 'chaos', 'chaos' FROM generate_series(1, 3) RETURNING id",
            CHAOS_COURSE,
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def _messages(load: Load, details: list[str], t0: float) -> dict[str, int]:
    accounts = sorted(load.ledger.accounts)
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        rows = await db.fetchall(
            "SELECT msg_id, thread_id, id, zalo_account_id FROM zalo_messages"
            f" WHERE zalo_account_id IN ({', '.join(['%s'] * len(accounts))})"
            " AND msg_id LIKE %s ORDER BY id",
            (*accounts, f"{load.prefix}-%"),
        )
    finally:
        await db.close()
    stored_ids = [r[0] for r in rows]
    # Per conversation, the flusher must have stored messages in the order they were sent.
    last: dict[tuple[int, str], tuple[int, str, int]] = {}
    out_of_order = 0
    acked_at = load.ledger.message_acked_at
    for msg_id, thread, row_id, account in rows:
        seq = int(msg_id.rsplit("-", 1)[1])
        before = last.get((account, thread))
        if before is not None and seq < before[0]:
            out_of_order += 1
            if out_of_order <= 5:
                shard = MESSAGE_STREAMS.shard_of(account, thread)
                details.append(
                    f"out of order (shard {shard}): {msg_id} (id {row_id}, acknowledged"
                    f" {acked_at.get(msg_id, t0) - t0:+.2f}s) stored after {before[1]} (id"
                    f" {before[2]}, acknowledged {acked_at.get(before[1], t0) - t0:+.2f}s)"
                )
        last[(account, thread)] = (seq, msg_id, row_id)
    stored = set(stored_ids)
    return {
        "stored": len(stored),
        "duplicates": len(stored_ids) - len(stored),
        "lost": len(load.ledger.acked - stored),
        "unexpected": len(stored - load.ledger.sent),
        "out_of_order": out_of_order,
    }


async def _likes(
    ledger: Ledger, posts: list[int], stack: ChaosStack, details: list[str], t0: float
) -> dict[str, int]:
    """Final like state per (user, post) in PostgreSQL and in the user's Redis SET, against the
    last acknowledged toggle of the pair."""
    conn = await asyncpg.connect(pg_admin_url())
    try:
        rows = await conn.fetch(
            "SELECT user_id, post_id FROM post_likes WHERE post_id = ANY($1::bigint[])", posts
        )
        drift = await conn.fetchval(
            "SELECT count(*) FROM posts p WHERE p.id = ANY($1::bigint[]) AND p.like_count <>"
            " (SELECT count(*) FROM post_likes l WHERE l.post_id = p.id)",
            posts,
        )
    finally:
        await conn.close()
    in_pg = {(r[0], r[1]) for r in rows}
    users = sorted({user for user, _ in ledger.likes})
    members = [member(POST, p) for p in posts]
    in_redis: set[tuple[int, int]] = set()
    cold: set[int] = set()
    missing = 0
    client = stack.client()
    try:
        for start in range(0, len(users), 500):
            chunk = users[start : start + 500]
            async with client.pipeline(transaction=False) as pipe:
                for user in chunk:
                    key = LikeCache.beside(LIKE_STREAMS).liked_set(user, CHAOS_COURSE)
                    pipe.exists(key)
                    pipe.smismember(key, members)
                replies = await pipe.execute()
            for i, user in enumerate(chunk):
                if not replies[2 * i]:
                    missing += 1
                    cold.add(user)
                for post, liked in zip(posts, replies[2 * i + 1], strict=True):
                    if liked:
                        in_redis.add((user, post))
    finally:
        await client.aclose()
    reordered = lost = mismatch = 0
    for pair, history in ledger.likes.items():
        expected = history.expected
        if expected is None:
            continue
        if (pair in in_pg) != expected:
            reordered += 1
            lost += expected
            if reordered <= 8:
                details.append(f"reordered: (user, post) {pair} {_history(history, t0)}")
        # A user whose SET is gone is answered from the database (warmed again): only a SET
        # that exists can disagree on its own.
        if pair[0] not in cold and (pair in in_redis) != expected:
            mismatch += 1
            if mismatch <= 3:
                details.append(f"Redis mismatch: (user, post) {pair} {_history(history, t0)}")
    return {
        "like_pairs": len(ledger.likes),
        "likes_stored": len(in_pg),
        "likes_lost": lost,
        "likes_reordered": reordered,
        "likes_redis_mismatch": mismatch,
        "likes_unexpected": len(in_pg - ledger.likes.keys()),
        "redis_sets_missing": missing,
        "counter_drift": int(drift),
    }


async def _forum(ledger: Ledger, posts: list[int], prefix: str) -> dict[str, int]:
    """Each acknowledged comment stored once; one never acknowledged stored at most once."""
    if not ledger.forum_sent:
        return {"forum_acknowledged": 0, "forum_lost": 0, "forum_duplicates": 0}
    conn = await asyncpg.connect(pg_admin_url())
    try:
        rows = await conn.fetch(
            "SELECT body, count(*) FROM comments WHERE post_id = ANY($1::bigint[])"
            " AND body LIKE $2 GROUP BY body",
            posts,
            f"{prefix}-f%",
        )
    finally:
        await conn.close()
    stored = {r[0]: r[1] for r in rows}
    return {
        "forum_acknowledged": len(ledger.forum_acked),
        "forum_lost": len(ledger.forum_acked - stored.keys()),
        "forum_duplicates": sum(n - 1 for n in stored.values())
        + len(stored.keys() - ledger.forum_sent),
    }


def scenario_of(name: str) -> Scenario:
    control = CONTROLS.get(name)
    base = control.fault if control else name
    return FAULTS[base] if base in FAULTS else FAILOVERS[base]


async def run_scenario(name: str, *, before: float = 2.0) -> Outcome:
    """Run a fault of FAULTS or FAILOVERS, or a negative control of CONTROLS, by name."""
    control = CONTROLS.get(name)
    scenario = scenario_of(name)
    inject = control.inject if control and control.inject else scenario.inject
    posts = await prepare()
    stack = ChaosStack(
        aof=control.aof if control else True,
        queue_max=scenario.queue_max,
        flushers=scenario.flushers,
        flusher_env=scenario.flusher_env,
        flusher_common_env={} if not control or control.fencing else {"FLUSHER_FENCING": "false"},
        proxied=scenario.proxied,
        own_pg_proxy=scenario.own_pg_proxy,
        redis_cluster=scenario.redis_cluster,
        wait_replicas=(
            control.wait_replicas
            if control and control.wait_replicas is not None
            else scenario.wait_replicas
        ),
    )
    marks = [time.monotonic()]
    try:
        await stack.start()
        marks.append(time.monotonic())
        load = Load(
            f"127.0.0.1:{stack.services['ingest'].port}",
            f"127.0.0.1:{stack.services['likes'].port}",
            f"c{uuid.uuid4().hex[:8]}",
            posts,
            USERS,
            scenario.likes,
            forum_addr=f"127.0.0.1:{stack.services['ingest'].forum_port}",
        )
        stop = asyncio.Event()
        task = asyncio.create_task(load.run(stop, scenario.message_senders, scenario.forum_writers))
        try:
            await asyncio.sleep(before)
            injected = time.monotonic()
            extra = await inject(stack, load)
            await asyncio.sleep(scenario.after)
        finally:
            stop.set()
            await task
        # Recovery: the longest stretch without an acknowledgement, from the fault on.
        gaps = {
            path: _longest_gap(times, injected)
            for path, times in (
                ("messages", load.ledger.message_ack_times),
                ("likes", load.ledger.like_ack_times),
                ("forum", load.ledger.forum_ack_times),
            )
        }
        marks.append(time.monotonic())
        drained = await stack.drained()
        marks.append(time.monotonic())
        client = stack.client()
        details = [f"{at - injected:+.2f}s {what}" for at, what in stack.events]
        try:
            pending = await stack.pending(client)
            dead = await stack.dead_letters(client)
            if drained is None:
                details += [f"not drained: {line}" for line in await stack.stuck(client)]
        finally:
            await client.aclose()
        counts = await _messages(load, details, injected)
        counts |= await _likes(load.ledger, posts, stack, details, injected)
        counts |= await _forum(load.ledger, posts, load.prefix)
        crashed = stack.crashed()
        marks.append(time.monotonic())
    finally:
        await stack.stop()
    marks.append(time.monotonic())
    spans = [b - a for a, b in itertools.pairwise(marks)]
    details.append(
        "seconds: start {:.1f}, load and fault {:.1f}, drain {:.1f}, accounting {:.1f},"
        " stop {:.1f}".format(*spans)
    )
    return Outcome(
        fault=name,
        sent=len(load.ledger.sent),
        acknowledged=len(load.ledger.acked),
        likes_acknowledged=load.ledger.like_ops_acked,
        pending=pending,
        dead_letters=dead,
        message_gap_s=gaps["messages"],
        like_gap_s=gaps["likes"],
        forum_gap_s=gaps["forum"],
        drained_s=drained,
        errors=dict(load.ledger.errors),
        error_samples=dict(load.ledger.error_samples),
        extra=extra,
        crashed=crashed,
        log_dir=str(stack.log_dir),
        control=control is not None,
        details=tuple(details),
        **counts,
    )


def _history(history: PairHistory, t0: float) -> str:
    ops = ", ".join(
        f"{'like' if op else 'unlike'}@{at - t0:+.2f}s"
        for op, at in zip(history.acked, history.acked_at, strict=True)
    )
    return f"acknowledged {ops} (times from the fault)"


def _longest_gap(times: list[float], since: float) -> float:
    after = sorted(t for t in times if t >= since)
    return max((b - a for a, b in zip([since, *after], after, strict=False)), default=float("nan"))


def _figure(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def verdict(o: Outcome) -> str:
    problems = ", ".join(o.problems)
    if o.control:
        control = CONTROLS[o.fault]
        text = f"detected: {problems}" if control.detects(o) else "**NOT DETECTED**"
    elif o.clean:
        text = "0 lost, 0 dup, 0 reordered, 0 drift"
    else:
        text = f"**FAILED: {problems}**"
    notes = ", ".join(f"{k}={_figure(v)}" for k, v in o.extra.items())
    return f"{text} ({notes})" if notes else text


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| fault | msgs sent | acked | stored | lost | dup | unexpected | out of order |"
        " like toggles acked | pairs | liked in PG | lost likes | reordered | Redis mismatch |"
        " counter drift | forum writes acked / lost / dup | pending | dead letters |"
        " longest ack gap msgs / likes / forum | drained in | verdict |",
        "|---|" + "---:|" * 19 + "---|",
    ]
    for o in outcomes:
        drained = f"{o.drained_s:.1f} s" if o.drained_s is not None else "never"
        forum = (
            f"{o.forum_acknowledged:,} / {o.forum_lost} / {o.forum_duplicates}"
            if o.forum_acknowledged or o.forum_lost or o.forum_duplicates
            else "–"
        )
        forum_gap = "–" if math.isnan(o.forum_gap_s) else f"{o.forum_gap_s:.2f} s"
        lines.append(
            f"| {o.fault} | {o.sent:,} | {o.acknowledged:,} | {o.stored:,} | {o.lost} |"
            f" {o.duplicates} | {o.unexpected} | {o.out_of_order} | {o.likes_acknowledged:,} |"
            f" {o.like_pairs:,} | {o.likes_stored:,} | {o.likes_lost} | {o.likes_reordered} |"
            f" {o.likes_redis_mismatch} | {o.counter_drift} | {forum} | {o.pending} |"
            f" {o.dead_letters} | {o.message_gap_s:.2f} s / {o.like_gap_s:.2f} s / {forum_gap} |"
            f" {drained} | {verdict(o)} |"
        )
    return "\n".join(lines)


def describe(o: Outcome) -> str:
    """What a table row leaves out: the errors the load saw, and where the logs are."""
    errors = ", ".join(f"{k}={v:,}" for k, v in sorted(o.errors.items())) or "none"
    lines = [f"{o.fault}: RPC errors seen by the load: {errors}; logs in {o.log_dir}"]
    lines += [f"    {code}: {sample[:200]}" for code, sample in sorted(o.error_samples.items())]
    if o.redis_sets_missing:
        lines.append(f"    {o.redis_sets_missing} users' liked SETs are missing in Redis")
    lines += [f"    {line}" for line in o.details]
    return "\n".join(lines)
