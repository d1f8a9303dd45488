"""Failovers of the SQL datastores on their HA engines (`make up HA=1`, docs/high-availability.md):
a machine lost, a machine frozen, a node partitioned into a minority — under messages, likes and
forum writes, accounted like every other fault.

The flusher takes an entry off its stream right after its COMMIT, so only the copy that takes over
still holds what was acknowledged: a failover that promotes a copy missing the last commits loses
them for good. Each fault returns what an SRE would ask: how far the copy was behind just before,
how long until writes succeed again, what callers were told meanwhile, and how long until the
pair is whole again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

import asyncpg

from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.faults.scenario import Scenario
from tests.chaos.harness.load import Load
from tests.chaos.harness.local_stack import mysql_admin_url, pg_admin_url
from tests.chaos.harness.sql_nodes import (
    REPLICATING,
    GaleraNode,
    PgNode,
    galera_replication,
    patroni_config,
    pg_leader,
    pg_members,
    pg_replication,
    pg_sync_standby,
)
from tests.chaos.harness.stack import ChaosStack
from tools.waiting import seconds_until, until

PG_LEADER_LOST = "PostgreSQL leader's machine lost (kill -9; Patroni promotes the sync standby)"
PG_LEADER_FROZEN = "PostgreSQL leader frozen past Patroni's TTL (SIGSTOP, then SIGCONT)"
GALERA_WRITER_LOST = "kill -9 the Galera node the flusher writes to"
GALERA_MINORITY = "Galera writer partitioned into a minority"

# Patroni's leader key lives 20 s (ttl): a promotion comes after it expires.
PROMOTION_WAIT_S = 90
# A node back: pg_rewind or a state transfer, then streaming / Synced again.
REJOIN_WAIT_S = 180
# How long the frozen leader stays frozen, and the partitioned Galera node cut off, once the
# other copy took the writes: long enough for every client to have moved.
HELD_S = 3.0
# The negative control: the standby's link cut this long before the leader's machine is lost.
LINK_CUT_S = 4.0
# RESOURCE_EXHAUSTED: ingest's backlog bound, while the flusher cannot write.
RETRY_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")
# A row the probes write straight to a node (never through the write endpoint): a fence row no
# shard uses.
PROBE_STREAM = "chaos-probe:demoted"
ENDPOINT_PROBE = "chaos-probe:endpoint"


def _caller_errors(load: Load, before: Counter[str]) -> dict[str, float]:
    """What callers were told meanwhile: refusals to retry (UNAVAILABLE, or their own deadline)
    and anything else (should be none). A false acknowledgement would show in the accounting as
    a loss."""
    during = load.ledger.errors - before
    retry = sum(n for code, n in during.items() if code.split()[-1] in RETRY_CODES)
    return {"refused_retry": retry, "other_errors": sum(during.values()) - retry}


class CommitPauses:
    """Samples the flusher's committed entries of a family (every 0.1 s) while a fault runs: the
    longest stretch without a commit is how long the database path was out for the service."""

    def __init__(self, stack: ChaosStack, family: str) -> None:
        self._stack, self._family = stack, family
        self._moved: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CommitPauses:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sample(self) -> None:
        last = -1.0
        while True:
            value = await self._stack.metric("agora_flush_entries_total", stream=self._family)
            if value > last:
                self._moved.append(time.monotonic())
                last = value
            await asyncio.sleep(0.1)

    def longest(self, since: float) -> float:
        times = [since, *(t for t in self._moved if t > since), time.monotonic()]
        return round(max(b - a for a, b in itertools.pairwise(times)), 1)


async def _endpoint_writes_back(engine: str, since: float) -> float:
    """Seconds from `since` (the fault) until a write through the engine's write endpoint
    (HAProxy on MYSQL_PORT or PG_PORT, the services' address) succeeds, on a new connection per
    attempt as a client after a failure does."""

    async def write() -> bool:
        if engine == "postgres":
            conn = await asyncpg.connect(pg_admin_url(), timeout=1, command_timeout=1)
            try:
                await conn.execute(
                    "INSERT INTO stream_fences (stream, epoch, holder) VALUES ($1, 1, 'chaos')"
                    " ON CONFLICT (stream) DO UPDATE SET epoch = stream_fences.epoch + 1",
                    ENDPOINT_PROBE,
                )
            finally:
                await conn.close(timeout=1)
        else:
            db = await MysqlDatabase.connect(mysql_admin_url())
            try:
                async with asyncio.timeout(1):
                    await db.execute(
                        "INSERT INTO stream_fences (stream, epoch, holder) VALUES (%s, 1, 'chaos')"
                        " ON DUPLICATE KEY UPDATE epoch = epoch + 1",
                        (ENDPOINT_PROBE,),
                    )
            finally:
                await db.close()
        return True

    await until(
        f"a write through {engine}'s endpoint",
        write,
        PROMOTION_WAIT_S,
        every=0.1,
        ignoring=(Exception,),
    )
    return round(time.monotonic() - since, 1)


async def _rejoined(what: str, check: Callable[[], Awaitable[bool]]) -> float:
    took = await seconds_until(check, REJOIN_WAIT_S, every=0.5, ignoring=(Exception,))
    if took is None:
        raise RuntimeError(f"{what} was not whole again within {REJOIN_WAIT_S} s")
    return round(took, 1)


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


# --- PostgreSQL under Patroni ---


async def _lose_pg_machine(stack: ChaosStack, leader: PgNode) -> dict[str, float]:
    """kill -9 Patroni and PostgreSQL of `leader` together: its machine is gone."""
    killed = await leader.signal(signal.SIGKILL)
    t0 = time.monotonic()
    stack.note(f"{leader.name} lost: Patroni and PostgreSQL kill -9 ({killed} processes)")
    return await _taken_over(stack, leader, t0)


async def _taken_over(stack: ChaosStack, leader: PgNode, t0: float) -> dict[str, float]:
    """When the standby was promoted, and when a write through the endpoint succeeded again."""
    promoted = await seconds_until(leader.other.is_primary, PROMOTION_WAIT_S)
    if promoted is None:
        raise RuntimeError(f"{leader.other.name} was never promoted")
    stack.note(f"{leader.other.name} promoted")
    writes = await _endpoint_writes_back("postgres", t0)
    stack.note("a write through PG_PORT succeeds again")
    return {"promoted_s": round(promoted, 1), "writes_back_s": writes, "t0": t0}


async def _back_as_standby(stack: ChaosStack, node: PgNode) -> float:
    """The lost machine back: Patroni rewinds it, and it streams as the synchronous standby."""
    await node.start()
    took = await _rejoined(node.name, lambda: pg_sync_standby(node))
    stack.note(f"{node.name} back as the synchronous standby")
    return took


def _after(
    figures: dict[str, float], pauses: CommitPauses, load: Load, errors: Counter[str]
) -> dict[str, float]:
    """The figures every failover reports, once the pair is whole again."""
    t0 = figures.pop("t0")
    return figures | {"flusher_pause_s": pauses.longest(t0)} | _caller_errors(load, errors)


async def lose_pg_leader(stack: ChaosStack, load: Load) -> dict[str, float]:
    leader = await pg_leader()
    figures = await pg_replication(leader)
    errors = Counter(load.ledger.errors)
    async with CommitPauses(stack, "likes") as pauses:
        figures |= await _lose_pg_machine(stack, leader)
        figures["rejoined_s"] = await _back_as_standby(stack, leader)
    return _after(figures, pauses, load, errors)


async def lose_pg_leader_async(stack: ChaosStack, load: Load) -> dict[str, float]:
    """The negative control: the same loss with the standby asynchronous and its link cut
    first."""
    leader = await pg_leader()
    standby = leader.other
    errors = Counter(load.ledger.errors)
    # Asynchronous, and promotable however far behind (Patroni's default refuses past 1 MB).
    await patroni_config(synchronous_mode=False, maximum_lag_on_failover=1 << 40)
    stack.note("synchronous_mode off")
    async with CommitPauses(stack, "likes") as pauses:
        try:
            await until("an asynchronous standby", lambda: _asynchronous(standby), 30)
            figures = await pg_replication(leader)
            sender = await leader.walsender()
            if sender is None:
                raise RuntimeError(f"{leader.name} has no WAL sender to cut")
            with _stopped(sender):
                stack.note(
                    f"replication link to {standby.name} cut ({leader.name}'s WAL sender stopped)"
                )
                await asyncio.sleep(LINK_CUT_S)
                cut = await pg_replication(leader)
                figures["lag_bytes_at_loss"] = cut["standby_lag_bytes"]
                killed = await leader.signal(signal.SIGKILL)
                t0 = time.monotonic()
                stack.note(f"{leader.name} lost: kill -9 ({killed} processes)")
            figures |= await _taken_over(stack, leader, t0)
        finally:
            await patroni_config(synchronous_mode=True, maximum_lag_on_failover=1 << 20)
            stack.note("synchronous_mode on again")
        figures["rejoined_s"] = await _back_as_standby(stack, leader)
    return _after(figures, pauses, load, errors)


async def _asynchronous(standby: PgNode) -> bool:
    member = (await pg_members()).get(standby.name, {})
    return member.get("role") == "replica" and member.get("state") in REPLICATING


async def freeze_pg_leader(stack: ChaosStack, load: Load) -> dict[str, float]:
    """SIGSTOP the leader's machine (Patroni, PostgreSQL and its backends) until its leader key
    expired and the standby took over, then SIGCONT it: the old leader must not take a write."""
    leader = await pg_leader()
    figures = await pg_replication(leader)
    errors = Counter(load.ledger.errors)
    async with CommitPauses(stack, "likes") as pauses:
        frozen = await leader.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        stack.note(f"{leader.name} frozen ({frozen} processes SIGSTOP)")
        try:
            figures |= await _taken_over(stack, leader, t0)
            await asyncio.sleep(HELD_S)
        finally:
            await leader.signal(signal.SIGCONT)
            stack.note(f"{leader.name} thawed (SIGCONT)")
        figures |= await _refuses_writes(leader)
        stack.note(f"{leader.name} runs as a standby and refuses writes")
        figures["rejoined_s"] = await _rejoined(leader.name, lambda: pg_sync_standby(leader))
        stack.note(f"{leader.name} back as the synchronous standby")
    return _after(figures, pauses, load, errors)


async def _refuses_writes(node: PgNode, seconds: float = 60) -> dict[str, float]:
    """Writes straight to a thawed former leader, bypassing the write endpoint, until it runs as
    a standby and refused one there: none may be acknowledged. Before Patroni demotes it, a
    COMMIT waits for a synchronous standby that is gone (the client's deadline ends it)."""
    accepted = refused = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            conn = await node.connect(seconds=1)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            refused += 1  # restarting as a standby: no connection, no write
            await asyncio.sleep(0.2)
            continue
        try:
            in_recovery = await conn.fetchval("SELECT pg_is_in_recovery()")
            await conn.execute(
                "INSERT INTO stream_fences (stream, epoch, holder) VALUES ($1, 1, 'chaos')"
                " ON CONFLICT (stream) DO UPDATE SET epoch = stream_fences.epoch + 1",
                PROBE_STREAM,
            )
            accepted += 1
        except asyncpg.ReadOnlySQLTransactionError:
            refused += 1
            if in_recovery:
                return {
                    "old_leader_writes_accepted": accepted,
                    "old_leader_writes_refused": refused,
                    "old_leader_read_only_s": round(time.monotonic() - started, 1),
                }
        except (OSError, asyncpg.PostgresError, TimeoutError):
            refused += 1
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=1)
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{node.name} never ran as a standby within {seconds:.0f} s")


# --- MariaDB on Galera ---


async def galera_writer() -> GaleraNode:
    """The node the write endpoint sends every connection to (HAProxy's stick table)."""
    db = await MysqlDatabase.connect(mysql_admin_url())
    try:
        row = await db.fetchone("SELECT @@wsrep_node_name")
    finally:
        await db.close()
    if row is None:
        raise RuntimeError("the write endpoint did not name its Galera node")
    return GaleraNode(int(str(row[0]).rsplit("-", 1)[1]))


async def lose_galera_writer(stack: ChaosStack, load: Load) -> dict[str, float]:
    writer = await galera_writer()
    figures = await galera_replication()
    errors = Counter(load.ledger.errors)
    async with CommitPauses(stack, "messages") as pauses:
        await writer.kill()
        t0 = figures["t0"] = time.monotonic()
        stack.note(f"{writer.name} kill -9")
        figures["writes_back_s"] = await _endpoint_writes_back("mariadb", t0)
        stack.note("a write through MYSQL_PORT succeeds again")
        await writer.start()
        figures["rejoined_s"] = await _rejoined(writer.name, writer.synced)
        stack.note(f"{writer.name} Synced again")
    return _after(figures, pauses, load, errors)


async def partition_galera_writer(stack: ChaosStack, load: Load) -> dict[str, float]:
    """The writer cut off the group (a network partition; the node runs on): alone it is a
    minority of the three votes, so it must refuse writes while the other node and garbd go on."""
    writer = await galera_writer()
    figures = await galera_replication()
    errors = Counter(load.ledger.errors)
    async with CommitPauses(stack, "messages") as pauses:
        await writer.isolate(True)
        t0 = figures["t0"] = time.monotonic()
        stack.note(f"{writer.name} partitioned off (gmcast.isolate)")
        try:
            figures["writes_back_s"] = await _endpoint_writes_back("mariadb", t0)
            stack.note("a write through MYSQL_PORT succeeds again")
            figures |= await _minority_refuses(writer)
            await asyncio.sleep(HELD_S)
        finally:
            await writer.isolate(False)
            stack.note(f"{writer.name}'s partition healed")
        figures["rejoined_s"] = await _rejoined(writer.name, writer.synced)
        stack.note(f"{writer.name} Synced again")
    return _after(figures, pauses, load, errors)


async def _minority_refuses(node: GaleraNode, seconds: float = 30) -> dict[str, float]:
    """A write straight to the node (as its administrator, bypassing the endpoint), once it
    knows it is in a minority: refused (error 1047), never stored."""

    async def minority() -> bool:
        status = await node.status("wsrep_cluster_status")
        return status.get("wsrep_cluster_status") != "Primary"

    await until(f"{node.name} to see itself in a minority", minority, seconds)
    try:
        await node.sql(
            "INSERT INTO agora_test.stream_fences (stream, epoch, holder)"
            f" VALUES ('{PROBE_STREAM}', 1, 'chaos') ON DUPLICATE KEY UPDATE epoch = epoch + 1"
        )
    except RuntimeError as exc:
        if "1047" not in str(exc) and "WSREP" not in str(exc):
            raise
        return {"minority_writes_accepted": 0, "minority_writes_refused": 1}
    return {"minority_writes_accepted": 1, "minority_writes_refused": 0}


# Forum comments beside the messages and likes: PostgreSQL's synchronous write path.
FAILOVERS: dict[str, Scenario] = {
    PG_LEADER_LOST: Scenario(lose_pg_leader, forum_writers=2),
    PG_LEADER_FROZEN: Scenario(freeze_pg_leader, forum_writers=2),
    GALERA_WRITER_LOST: Scenario(lose_galera_writer, forum_writers=2),
    GALERA_MINORITY: Scenario(partition_galera_writer, forum_writers=2),
}
# make test's HA pass: one failover of each engine.
QUICK_FAILOVERS = (PG_LEADER_LOST, GALERA_WRITER_LOST)
