"""The faults, each injected at a chosen point and healed the way an orchestrator (or the network,
or a DBA) would. Each returns figures for the table; a Scenario says what stack and load it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import redis.asyncio as redis
from redis.crc import key_slot

from services.runtime.mysql import MysqlDatabase
from services.runtime.redis_client import REDIS_ERRORS
from services.streams.likes import GROUP as LIKE_GROUP
from services.streams.messages import GROUP as MESSAGE_GROUP
from services.streams.monitor import counters_sum
from tests.chaos.harness import mode_switch, noisy_account
from tests.chaos.harness.load import CHAOS_ACCOUNT, LikePlan, Load, thread_of
from tests.chaos.harness.proxy import ProxyProcess
from tests.chaos.harness.stack import (
    LEASE_TTL_MS,
    LIKE_STREAMS,
    MESSAGE_STREAMS,
    ChaosStack,
    Service,
    supervisorctl,
)
from tools.redis_cluster import LocalCluster, Node
from tools.waiting import seconds_until, until

ROOT = Path(__file__).resolve().parents[3]
Fault = Callable[[ChaosStack, Load], Awaitable[dict[str, float]]]
LEASE_S = LEASE_TTL_MS / 1000
LIKE_SHARDS = frozenset(LIKE_STREAMS.all_streams())
# Longer than every datastore deadline of the chaos stack (2 s), so each call in flight fails.
BLACKHOLE_S = 8.0


@dataclass(frozen=True)
class Scenario:
    """A fault and what it runs against."""

    inject: Fault
    flushers: int = 1
    # Extra environment of flusher-a, flusher-b, … (in order).
    flusher_env: tuple[Mapping[str, str], ...] = ()
    # Every service reaches MySQL, PostgreSQL and Redis through a proxy.
    proxied: bool = False
    # Flushers (by letter) whose PostgreSQL goes through a proxy of their own.
    own_pg_proxy: tuple[str, ...] = ()
    queue_max: int = 50_000
    likes: LikePlan = field(default_factory=LikePlan)
    after: float = 3.0
    # On a local Redis Cluster (3 masters, 1 replica each) instead of the single Redis, ingest
    # and likes acknowledging a write once this many replicas have it (REDIS_WAIT_REPLICAS).
    redis_cluster: bool = False
    wait_replicas: int = 0
    # The chaos account's closed-loop message senders (0: the scenario sends its own messages).
    message_senders: int = 3
    # Closed-loop writers of forum comments (PostgreSQL's synchronous write path).
    forum_writers: int = 0


def _errors_since(load: Load, before: Counter[str]) -> Counter[str]:
    return load.ledger.errors - before


async def kill_ingest(stack: ChaosStack, load: Load) -> dict[str, float]:
    ingest = stack.services["ingest"]
    ingest.kill()
    await asyncio.sleep(0.5)
    await ingest.start()
    await ingest.healthy()
    return {}


async def _flusher_fault(stack: ChaosStack, point: str) -> dict[str, float]:
    flusher = stack.flusher()
    flusher.kill()
    await flusher.start(FAULT_POINT=point)
    code = await flusher.exited(30)
    if code is None:
        raise RuntimeError(f"the flusher never reached fault point {point}")
    await flusher.start()
    await flusher.healthy()
    return {}


async def kill_flusher_mid_batch(stack: ChaosStack, load: Load) -> dict[str, float]:
    """SIGKILL inside a write transaction, just before COMMIT."""
    return await _flusher_fault(stack, "before_commit")


async def kill_flusher_after_commit(stack: ChaosStack, load: Load) -> dict[str, float]:
    """SIGKILL after COMMIT, before XACK + XDEL."""
    return await _flusher_fault(stack, "after_commit")


async def kill_redis(stack: ChaosStack, load: Load) -> dict[str, float]:
    stack.kill_redis()
    await asyncio.sleep(0.5)
    await stack.start_redis()
    return {}


async def _supervised_datastore(name: str, ready: Callable[[], Awaitable[bool]]) -> None:
    """kill -9 a datastore of the local stack; supervisord restarts it (autorestart)."""
    await supervisorctl("signal", "KILL", f"datastores:{name}")
    await asyncio.sleep(1)
    await until(f"{name} to come back", ready, 119, every=0.5, ignoring=(Exception,))


def mysql_admin_url() -> str:
    e = os.environ
    return (
        f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}"
        "/agora_test"
    )


def pg_admin_url() -> str:
    e = os.environ
    return (
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
        "/agora_test"
    )


async def kill_mariadb(stack: ChaosStack, load: Load) -> dict[str, float]:
    async def ready() -> bool:
        db = await MysqlDatabase.connect(mysql_admin_url())
        try:
            return await db.fetchone("SELECT 1") == (1,)
        finally:
            await db.close()

    await _supervised_datastore("mariadb", ready)
    return {}


async def kill_postgres(stack: ChaosStack, load: Load) -> dict[str, float]:
    async def ready() -> bool:
        conn = await asyncpg.connect(pg_admin_url())
        try:
            return bool(await conn.fetchval("SELECT 1") == 1)
        finally:
            await conn.close()

    await _supervised_datastore("postgres", ready)
    return {}


async def stall_flusher(stack: ChaosStack, load: Load, seconds: float = 6) -> dict[str, float]:
    """Stop the flusher until the ingest backlog bound is hit, then bring it back."""
    flusher = stack.flusher()
    await flusher.stop()
    client = stack.client()
    peak = 0.0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            info = await client.info("memory")
            peak = max(peak, float(info["used_memory"]))
            await asyncio.sleep(0.2)
        backlog = await counters_sum(
            client, [MESSAGE_STREAMS.backlog_key(s) for s in range(MESSAGE_STREAMS.shards)]
        )
    finally:
        await client.aclose()
    await flusher.start()
    await flusher.healthy()
    return {"backlog_at_bound": backlog, "redis_peak_mib": peak / 2**20}


class LeaseWatch:
    """Samples who holds each shard's lease, counting every time a shard changes hands."""

    def __init__(self, stack: ChaosStack) -> None:
        self._stack = stack
        self.moves = 0
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LeaseWatch]:
        self._task = asyncio.create_task(self._watch())
        try:
            yield self
        finally:
            # Told to end, not cancelled: a cancellation that lands inside a Redis command's own
            # timeout can come out as a Redis TimeoutError (Python 3.11's asyncio.timeout), which
            # the loop would take for a failed sample and go on, forever.
            self._done.set()
            try:
                await asyncio.wait_for(self._task, 10)
            except TimeoutError:
                self._task.cancel()

    async def _watch(self) -> None:
        client = self._stack.client()
        last: dict[str, str] = {}
        try:
            while not self._done.is_set():
                with contextlib.suppress(*REDIS_ERRORS):
                    for stream, holder in (await self._stack.lease_holders(client)).items():
                        # A lease lapsing is no move; the next holder being another replica is.
                        if holder is not None:
                            if last.get(stream, holder) != holder:
                                self.moves += 1
                            last[stream] = holder
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()


async def rebalance(stack: ChaosStack, load: Load) -> dict[str, float]:
    """Two flushers; SIGTERM one, start a third, start the first again: shards move each time."""
    a = stack.flusher("a")
    async with LeaseWatch(stack).running() as watch:
        await a.stop()  # graceful: it gives its shards back
        stack.note("flusher-a stopped (SIGTERM)")
        await asyncio.sleep(2 * LEASE_S)
        await stack.add_flusher()
        stack.note("flusher-c started")
        await asyncio.sleep(2 * LEASE_S)
        await a.start()
        await a.healthy()
        stack.note("flusher-a started again")
        await asyncio.sleep(2 * LEASE_S)
    client = stack.client()
    try:
        holders = list((await stack.lease_holders(client)).values())
    finally:
        await client.aclose()
    return {
        "shard_moves": watch.moves,
        **{f"held_by_{n[-1]}": holders.count(n) for n in stack.flusher_names()},
    }


async def _until(
    check: Callable[[], Awaitable[bool]], seconds: float, every: float = 0.01
) -> float | None:
    """Seconds until `check` holds; None if it never did within `seconds`."""
    return await seconds_until(
        check, seconds, every=every, ignoring=(redis.RedisError, OSError, asyncpg.PostgresError)
    )


async def _holds_like_shard(stack: ChaosStack, client: redis.Redis, name: str) -> bool:
    holders = await stack.lease_holders(client)
    return any(holders[s] == name for s in LIKE_STREAMS.all_streams())


async def _holds_all(stack: ChaosStack, client: redis.Redis, name: str, streams: list[str]) -> bool:
    holders = await stack.lease_holders(client)
    return bool(streams) and all(holders[s] == name for s in streams)


async def _freeze_when(
    stack: ChaosStack,
    client: redis.Redis,
    flusher: Service,
    state: Callable[[], Awaitable[bool]],
    seconds: float = 20,
) -> dict[str, int]:
    """SIGSTOP `flusher` at a moment it is working on a like batch (see
    ChaosStack.batches_in_hand) and `state()` holds, both checked again once it is stopped (a
    stopped process cannot change its state); a miss is resumed at once (a few ms, far below the
    lease) and tried again. Returns the batches in hand by stream (empty: never hit, stopped
    anyway)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await stack.batches_in_hand(client, flusher.name) and await state():
            flusher.pause()
            hand = await stack.batches_in_hand(client, flusher.name)
            if hand and await state():
                return hand
            flusher.resume()
        await asyncio.sleep(0.005)
    flusher.pause()
    return {}


async def freeze_past_lease(stack: ChaosStack, load: Load) -> dict[str, float]:
    """Two flushers; flusher-a is stopped (SIGSTOP) for longer than its lease, twice, while
    flusher-b takes its shards over and applies the users' newer toggles.

    1. A batch in memory: at a moment flusher-a has like entries read and no transaction open,
       its PostgreSQL goes down for it alone (its own proxy refuses), so its like consumers keep
       their batches and retry them, failing fast — alive, so still renewing their leases (a
       datastore that is down is no reason to give a shard up). Then SIGSTOP: the leases lapse,
       flusher-b takes the shards over, claims the entries and applies them and everything
       newer. PostgreSQL comes back for flusher-a, then SIGCONT: it retries its stale batch at
       once. Fencing must refuse it; without fencing it commits over the newer toggles (a GC
       pause or a partition between read and write looks exactly so).
    2. Inside a transaction: SIGSTOP while a like batch transaction is open (seen in
       pg_stat_activity, checked again once stopped): its locks, the fencing row's among them,
       hold flusher-b's takeover back until SIGCONT; then it commits first and flusher-b applies
       what is newer.
    Holding a transaction open on purpose would make the stale batch of (1) wait on row locks
    until its own supervisor cancels it, so the negative control would miss; polling finds open
    transactions often enough.
    """
    a = stack.flusher("a")
    proxy = stack.proxies["postgres:flusher-a"]
    fenced_before = _fenced_batches(stack)
    figures: dict[str, float] = {}
    client = stack.client()
    try:
        # 1. A batch in memory. A try where flusher-a lost its leases while stalled (its
        # supervisor busy elsewhere) shows nothing: its consumers stop, their batches dropped.
        for attempt in range(1, 4):
            await _until(lambda: _both_hold_like_shards(stack, client), 6 * LEASE_S)
            figures = await _stale_batch(stack, client, a, proxy)
            figures["attempts"] = attempt
            if figures["kept"]:
                break

        # 2. Inside a transaction, its locks held while stopped.
        rejoined = await _until(lambda: _holds_like_shard(stack, client, a.name), 6 * LEASE_S)
        stack.note(f"flusher-a holds a like shard again: {rejoined is not None}")

        async def in_tx() -> bool:
            return bool(await stack.pg_open_transactions(proxy))

        hand = await _freeze_when(stack, client, a, in_tx)
        stack.note(f"flusher-a stopped inside a transaction with like batches in hand {hand}")
        await asyncio.sleep(2 * LEASE_S)
        a.resume()
        # Its open transaction still holds the fencing row: it commits, then the takeover goes on.
        stack.note("flusher-a SIGCONT")
        figures |= {"held_mid_tx": sum(hand.values()) if hand else -1}
    finally:
        a.resume()
        with contextlib.suppress(Exception):
            await proxy.forward()
        await client.aclose()
    figures["fenced_batches"] = _fenced_batches(stack) - fenced_before
    return figures


async def _stale_batch(
    stack: ChaosStack, client: redis.Redis, a: Service, proxy: ProxyProcess
) -> dict[str, float]:
    """Phase 1 of freeze_past_lease, once."""

    async def idle() -> bool:
        return not await stack.pg_open_transactions(proxy)

    hand = await _freeze_when(stack, client, a, idle)
    stack.note(f"flusher-a stopped with like batches in hand {hand}, no transaction open")
    await proxy.refuse()
    a.resume()
    stack.note("flusher-a resumed; its PostgreSQL refuses it")
    stalled = await _until(lambda: _stalled(stack, a), 3 * LEASE_S, every=0.05)
    await asyncio.sleep(LEASE_S)  # retrying, alive: it keeps renewing its leases
    flushed, failed = await _like_counters(a)  # nothing reaches PostgreSQL from here to SIGCONT
    a.pause()
    kept = await _holds_all(stack, client, a.name, list(hand))
    held = await stack.held_by(client, a.name)
    stack.note(f"stalled={stalled is not None}, leases kept={kept}; SIGSTOP holding {held}")
    took = await _until(
        lambda: _holds_all(stack, client, "flusher-b", list(hand)), 6 * LEASE_S, every=0.05
    )
    stack.note(f"flusher-b holds those shards: {took is not None}")
    claimed = await _until(lambda: _holds_none(stack, client, a.name), 4 * LEASE_S)
    stack.note(f"flusher-b claimed what flusher-a held: {claimed is not None}")
    # flusher-b applies what it claimed and what came after. Its transactions lock the same hot
    # post rows the stale batch needs: wait for it to catch up, so that batch is not held up
    # behind them (past a lease its own supervisor cancels it, and it shows nothing).
    await asyncio.sleep(1.0)
    caught_up = await _until(lambda: _likes_waiting_below(client, 50), 3 * LEASE_S, every=0.05)
    stack.note(f"flusher-b caught up with the likes: {caught_up is not None}")
    await proxy.forward()
    a.resume()
    stack.note("PostgreSQL back for flusher-a; SIGCONT")
    # What it commits before it holds a like shard again is the stale batch (a shard handed back
    # to it is claimed and applied after its lease is taken, so later).
    stale = retried = 0.0
    deadline = time.monotonic() + 2 * LEASE_S
    while time.monotonic() < deadline and not await _holds_like_shard(stack, client, a.name):
        committed, failures = await _like_counters(a)
        stale, retried = committed - flushed, failures - failed
        await asyncio.sleep(0.05)
    stack.note(f"until it held a like shard again, flusher-a committed {stale:.0f} likes")
    stack.note(f"and failed {retried:.0f} attempts")
    return {
        "held": held if hand else -1,
        "stalled": int(stalled is not None),
        "kept": int(kept),
        "takeover_s": took if took is not None else -1,
        "claimed": int(claimed is not None),
        "stale_likes_committed": stale,
    }


async def _like_counters(flusher: Service) -> tuple[float, float]:
    """Likes the flusher committed, and like batch attempts that failed, so far."""
    samples = [s for f in await flusher.metrics() for s in f.samples]
    return (
        sum(
            float(s.value)
            for s in samples
            if s.name == "agora_flush_entries_total" and s.labels.get("stream") == "likes"
        ),
        sum(
            float(s.value)
            for s in samples
            if s.name == "agora_stream_stall_retries_total" and s.labels.get("stream") == "likes"
        ),
    )


async def _both_hold_like_shards(stack: ChaosStack, client: redis.Redis) -> bool:
    return await _holds_like_shard(stack, client, "flusher-a") and await _holds_like_shard(
        stack, client, "flusher-b"
    )


async def _stalled(stack: ChaosStack, flusher: Service) -> bool:
    """The flusher reports a like shard stalled on the infrastructure (it retries its batch)."""
    families = await flusher.metrics()
    return any(
        s.name == "agora_stream_stalled" and s.value == 1 and s.labels.get("stream") in LIKE_SHARDS
        for f in families
        for s in f.samples
    )


async def _likes_waiting_below(client: redis.Redis, entries: int) -> bool:
    lengths = [int(await client.xlen(s)) for s in LIKE_STREAMS.all_streams()]
    return sum(lengths) < entries


async def _holds_none(stack: ChaosStack, client: redis.Redis, name: str) -> bool:
    return await stack.held_by(client, name) == 0


def _fenced_batches(stack: ChaosStack) -> int:
    """Batches refused by fencing, from the flushers' logs: a consumer stops with 'epoch N was
    fenced off'; a takeover that found a newer epoch in the database says which (not counted)."""
    return sum(
        stack.services[n].log_count("was fenced off", unless="the datastore holds")
        for n in stack.flusher_names()
    )


async def _blackhole(stack: ChaosStack, load: Load, name: str) -> dict[str, float]:
    """Cut one datastore off for longer than every deadline, then heal the network."""
    proxy = stack.proxies[name]
    errors = Counter(load.ledger.errors)
    retries = await stack.metric("agora_stream_stall_retries_total")
    await proxy.blackhole()
    stack.note(f"{name} blackholed")
    await asyncio.sleep(BLACKHOLE_S)
    stats = await proxy.forward()
    stack.note(f"{name} forwarding again")
    during = _errors_since(load, errors)
    await asyncio.sleep(1.0)
    return {
        "connections_cut": float(stats["blackholed"]),
        "rpc_errors": sum(during.values()),
        "unavailable": during["UNAVAILABLE"] + during["DEADLINE_EXCEEDED"],
        "stall_retries": await stack.metric("agora_stream_stall_retries_total") - retries,
    }


async def blackhole_mysql(stack: ChaosStack, load: Load) -> dict[str, float]:
    return await _blackhole(stack, load, "mysql")


async def blackhole_postgres(stack: ChaosStack, load: Load) -> dict[str, float]:
    return await _blackhole(stack, load, "postgres")


async def blackhole_redis(stack: ChaosStack, load: Load) -> dict[str, float]:
    return await _blackhole(stack, load, "redis")


async def redis_full(stack: ChaosStack, load: Load, seconds: float = 4) -> dict[str, float]:
    """maxmemory just above what Redis uses: producers are refused, the flusher must drain."""
    client = stack.client()
    errors = Counter(load.ledger.errors)
    try:
        flushed = await stack.metric("agora_flush_entries_total")
        waiting = await stack.waiting(client)
        # The flusher keeps the streams short, so used memory moves by tens of KiB either way:
        # the limit follows it down (never up), so it stays just above what is used.
        limit = peak = over = samples = 0
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                used = int((await client.info("memory"))["used_memory"])
                if not limit or used + 1024 < limit:
                    limit = used + 1024
                    await client.config_set("maxmemory", limit)
                peak, over, samples = max(peak, used), over + (used > limit), samples + 1
                await asyncio.sleep(0.05)
            flushed_during = await stack.metric("agora_flush_entries_total") - flushed
        finally:
            await client.config_set("maxmemory", 0)
        stack.note(f"maxmemory followed used memory down to {limit:,}; back to 0")
    finally:
        await client.aclose()
    during = _errors_since(load, errors)
    return {
        "refused": during["RESOURCE_EXHAUSTED"],
        "other_errors": sum(during.values()) - during["RESOURCE_EXHAUSTED"],
        "waiting_at_start": waiting,
        "flushed_while_full": flushed_during,
        "time_over_limit_pct": 100 * over / max(samples, 1),
    }


FLUSHER_MYSQL = "'agora_flusher'@'127.0.0.1'"
FAMILIES = ("messages", "likes")


async def _revoke(mysql: MysqlDatabase, pg: asyncpg.Connection) -> list[str]:
    """INSERT on zalo_messages and post_likes taken from the flusher's users; returns the MySQL
    tables given a table-level INSERT meanwhile (see below), for `_restore`."""
    # MySQL grants the flusher INSERT on the whole database (stack.sh), and a table-level REVOKE
    # cannot take away a database-level privilege: take it from the database and give it back
    # on every other table, so only zalo_messages is refused.
    rows = await mysql.fetchall(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
    )
    others = [str(r[0]) for r in rows if r[0] != "zalo_messages"]
    for table in others:
        await mysql.execute(f"GRANT INSERT ON `{table}` TO {FLUSHER_MYSQL}")
    await mysql.execute(f"REVOKE INSERT ON agora_test.* FROM {FLUSHER_MYSQL}")
    await pg.execute("REVOKE INSERT ON post_likes FROM agora_flusher")
    return others


async def _restore(mysql: MysqlDatabase, pg: asyncpg.Connection, tables: list[str]) -> None:
    """Back to the grants of stack.sh and migrations/grants/postgres.sql."""
    await mysql.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON agora_test.* TO {FLUSHER_MYSQL}")
    for table in tables:
        with contextlib.suppress(Exception):  # never granted (a revoke that failed half-way)
            await mysql.execute(f"REVOKE INSERT ON `{table}` FROM {FLUSHER_MYSQL}")
    await pg.execute("GRANT SELECT, INSERT, DELETE ON post_likes, comment_likes TO agora_flusher")


async def ensure_grants() -> None:
    """The flusher's standard grants (a run interrupted while they were revoked leaves them so)."""
    mysql = await MysqlDatabase.connect(mysql_admin_url())
    pg = await asyncpg.connect(pg_admin_url())
    try:
        await _restore(mysql, pg, [])
    finally:
        await pg.close()
        await mysql.close()


async def _kill_sessions(user: str) -> int:
    """KILL the user's MySQL sessions, as the administrator over the unix socket (as stack.sh
    does: OS-user authentication; only an administrator may kill others' sessions). A session
    keeps the database-level privileges it logged in with, so a revoke bites on the flusher's
    pooled connections only once they reconnect."""
    socket = ROOT / "var/run/mysqld.sock"
    admin_user = "root" if os.geteuid() == 0 else getpass.getuser()
    admin = ["mariadb", "--no-defaults", f"--socket={socket}", "-u", admin_user, "-N", "-e"]
    proc = await asyncio.create_subprocess_exec(
        *admin,
        "SELECT id FROM information_schema.processlist"
        f" WHERE user = '{user}' AND db = 'agora_test'",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    ids = [int(line) for line in out.split()]
    for session in ids:
        kill = await asyncio.create_subprocess_exec(
            *admin, f"KILL CONNECTION {session}", stderr=asyncio.subprocess.DEVNULL
        )
        await kill.wait()
    return len(ids)


async def revoke_grants(stack: ChaosStack, load: Load, seconds: float = 5) -> dict[str, float]:
    """INSERT on zalo_messages (MariaDB) and post_likes (PostgreSQL) revoked for a while: the
    flusher must stall on both, dead-letter nothing, and drain once the grants are back."""
    mysql = await MysqlDatabase.connect(mysql_admin_url())
    pg = await asyncpg.connect(pg_admin_url())
    sample = "agora_stream_stall_retries_total"
    before = {f: await stack.metric(sample, kind="other", stream=f) for f in FAMILIES}
    tables: list[str] = []
    try:
        tables = await _revoke(mysql, pg)
        stack.note("INSERT revoked (zalo_messages, post_likes)")
        killed = await _kill_sessions("agora_flusher")
        stack.note(f"{killed} MySQL sessions of the flusher killed")
        await asyncio.sleep(seconds)
        after = {f: await stack.metric(sample, kind="other", stream=f) for f in FAMILIES}
    finally:
        await _restore(mysql, pg, tables)
        stack.note("grants restored")
        await pg.close()
        await mysql.close()
    return {
        "sessions_killed": killed,
        **{f"{f}_stalls_refused": after[f] - before[f] for f in FAMILIES},
    }


# Redis Cluster faults. The stream shards' keys, whose hash slots decide which master serves them.
STREAM_KEYS = MESSAGE_STREAMS.all_streams() + LIKE_STREAMS.all_streams()
# How long the failing master's replica (and the flusher) is stopped before the master is
# killed: the writes of this window reach the master alone, and no database. Below the
# replica validity window (cluster-replica-validity-factor 10 × node timeout), so the replica may
# still be promoted.
REPLICA_STOP_S = 2.0
# An acknowledgement this soon after the replica stopped may be of a write it still received.
ACK_IN_FLIGHT_S = 0.1
# Slots moved at least, per reshard (more when needed to carry a message and a like shard).
RESHARD_SLOTS = 2_000
# The flusher's lease on a cluster: its default (10 s), not the chaos stack's 2 s. Each lease is
# renewed on its own, but redis-py's cluster client refuses every command, on every slot, while
# the node it asks for COMMAND (its default node) is a dead master, until the failover: a lease
# shorter than a failover (node timeout + election, ~3-5 s here) could lapse on every shard.
CLUSTER_LEASE = {"FLUSHER_LEASE_TTL_MS": "10000"}
CLUSTER_LEASE_S = int(CLUSTER_LEASE["FLUSHER_LEASE_TTL_MS"]) / 1000
# The flusher stands still for ~10 s in the failover (stopped, then the master's slots down, then
# maybe its leases lapsed): a backlog bound that holds that much, so the load is refused only by
# the failover (the bound has its own scenario).
CLUSTER_QUEUE_MAX = 200_000


def _refusals(during: Counter[str]) -> dict[str, float]:
    """RPC errors the load saw: UNAVAILABLE or its own deadline (a write not acknowledged, to
    retry), and anything else (which a client may not retry: should be none)."""
    unavailable = during["UNAVAILABLE"] + during["DEADLINE_EXCEEDED"]
    return {"unavailable": unavailable, "other_errors": sum(during.values()) - unavailable}


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


async def _slot_ranges(cluster: LocalCluster) -> dict[int, list[tuple[int, int]]]:
    """Master port → the slot ranges it serves, as the first node that answers sees them."""
    for node in cluster.nodes:
        if not node.running:
            continue
        client = cluster.node_client(node)
        try:
            with contextlib.suppress(*REDIS_ERRORS):
                reply = await client.execute_command("CLUSTER", "SLOTS")
                ranges: dict[int, list[tuple[int, int]]] = {}
                for start, end, master, *_ in reply:
                    ranges.setdefault(int(master[1]), []).append((int(start), int(end)))
                return {port: sorted(r) for port, r in ranges.items()}
        finally:
            await client.aclose()
    raise RuntimeError("no node of the Redis Cluster answers CLUSTER SLOTS")


def _owners(ranges: dict[int, list[tuple[int, int]]]) -> dict[str, int]:
    """Stream key → the port of the master serving its slot."""
    owners = {}
    for key in STREAM_KEYS:
        slot = _slot(key)
        owners[key] = next(
            port for port, rs in ranges.items() if any(a <= slot <= b for a, b in rs)
        )
    return owners


def _node(cluster: LocalCluster, port: int) -> Node:
    return next(n for n in cluster.nodes if n.port == port)


def _signal(node: Node, sig: signal.Signals) -> None:
    if node.process is not None and node.process.poll() is None:
        node.process.send_signal(sig)


async def _replica_of(cluster: LocalCluster, master: Node) -> Node:
    client = cluster.node_client(master)
    try:
        role = await client.execute_command("ROLE")
    finally:
        await client.aclose()
    replicas = role[2]
    if not replicas:
        raise RuntimeError(f"master {master.address} has no replica")
    return _node(cluster, int(replicas[0][1]))


async def _until_promoted(cluster: LocalCluster, replica: Node, seconds: float = 30) -> float:
    """Seconds until `replica` says it is a master and every node serves every slot again."""
    started = time.monotonic()
    while (await cluster.roles()).get(replica.port) != "master":
        if time.monotonic() - started > seconds:
            raise RuntimeError(f"replica {replica.address} was never promoted")
        await asyncio.sleep(0.02)
    await cluster.wait_ok(seconds)
    return time.monotonic() - started


async def _replication_lag(master: Node, replica: Node, tag: str, probes: int = 100) -> list[float]:
    """Under the load, seconds from a write's acknowledgement by the master (no WAIT) until its
    replica has it: how long an acknowledged write exists on the master alone, the loss window
    of a master killed without WAIT. A key of the stream's hash slot (`tag`), read on the replica
    with READONLY."""
    key = f"chaos:{{{tag}}}:replication-probe"
    writer = redis.Redis(host="127.0.0.1", port=master.port, single_connection_client=True)
    reader = redis.Redis(host="127.0.0.1", port=replica.port, single_connection_client=True)
    lags = []
    try:
        await reader.execute_command("READONLY")
        for i in range(probes):
            await writer.set(key, i)
            acked = time.monotonic()
            while int(await reader.get(key) or -1) != i:
                if time.monotonic() - acked > 5:
                    raise RuntimeError("the replica did not get a probe write within 5 s")
            lags.append(time.monotonic() - acked)
        await writer.delete(key)
    finally:
        await writer.aclose()
        await reader.aclose()
    return sorted(lags)


def _acked_on(load: Load, streams: set[str], since: float, until: float) -> tuple[int, int]:
    """Messages and like toggles acknowledged in [since, until] whose shard is in `streams`."""
    messages = sum(
        since <= at <= until
        and MESSAGE_STREAMS.stream(MESSAGE_STREAMS.shard_of(CHAOS_ACCOUNT, thread_of(msg_id)))
        in streams
        for msg_id, at in load.ledger.message_acked_at.items()
    )
    toggles = sum(
        since <= at <= until
        for (user, _), history in load.ledger.likes.items()
        if LIKE_STREAMS.stream_of(user) in streams
        for at in history.acked_at
    )
    return messages, toggles


async def fail_over_master(stack: ChaosStack, load: Load) -> dict[str, float]:
    """kill -9 the master serving the most stream shards; its replica is promoted. Two flushers:
    the shards change hands across the failover, and fencing decides who may still commit.

    The loss window is made real, and the same with WAIT as without: the master's replica and the
    flusher are SIGSTOPped for REPLICA_STOP_S while the load goes on, and the master drops its
    replication link (CLIENT KILL TYPE replica) — a stopped replica alone loses nothing: the
    kernel keeps receiving the replication stream into its socket buffer, and it applies all of it
    once resumed, before it is promoted (a first version of this scenario lost nothing that way,
    WAIT or not). So what is written to the master's shards meanwhile is on the master alone (no
    replica, no database). Then SIGKILL the master and SIGCONT both; the replica is promoted; the
    old master is restarted (as an orchestrator would) and rejoins as the new master's replica.
    With WAIT 1 none of the window's writes to those shards can have been acknowledged
    (UNAVAILABLE, retried); without, they were acknowledged and died with the master (the
    negative control).

    flusher-b is resumed with the replica; flusher-a stays stopped, with whatever batches it had
    read, past its lease: flusher-b takes its shards over on the promoted replica's leases and
    epoch counters (which lost whatever the dead master alone had), claims its entries and
    applies them and everything newer. Then flusher-a is resumed: its batches must be refused
    (fenced off: each takeover took its epoch from the database), and it takes its share back.
    """
    cluster = stack.the_cluster()
    client = stack.client()
    try:
        shared = await _until(lambda: _both_hold_shards(stack, client), 3 * CLUSTER_LEASE_S)
    finally:
        await client.aclose()
    stack.note(f"both flushers hold shards: {shared is not None}")
    owners = _owners(await _slot_ranges(cluster))
    counts = Counter(owners.values())
    port = max(sorted(counts), key=lambda p: counts[p])
    master = _node(cluster, port)
    victim = {key for key, owner in owners.items() if owner == port}
    replica = await _replica_of(cluster, master)
    flushers = [stack.services[n] for n in stack.flusher_names()]
    tag = sorted(victim)[0].split("{", 1)[1].split("}", 1)[0]
    lags = await _replication_lag(master, replica, tag)
    errors = Counter(load.ledger.errors)
    stack.note(
        f"master {master.port} serves {', '.join(sorted(victim))}; its replica is {replica.port};"
        f" replication lag p50 {lags[len(lags) // 2] * 1000:.2f} ms, max {lags[-1] * 1000:.2f} ms"
    )
    _signal(replica, signal.SIGSTOP)
    for flusher in flushers:
        flusher.pause()
    stopped = time.monotonic()
    client = cluster.node_client(master)
    try:
        links = await client.execute_command("CLIENT", "KILL", "TYPE", "replica")
    finally:
        await client.aclose()
    stack.note(
        f"replica {replica.port} and the flusher SIGSTOPped; the master cut {links} replication"
        " link(s)"
    )
    await asyncio.sleep(REPLICA_STOP_S)
    cluster.kill(master)
    killed = time.monotonic()
    stack.note(f"master {master.port} SIGKILLed")
    _signal(replica, signal.SIGCONT)
    a = stack.flusher("a")
    fenced_before = _fenced_batches(stack)
    for flusher in flushers:
        if flusher is not a:
            flusher.resume()
    stack.note(f"replica {replica.port} and flusher-b SIGCONT; flusher-a stays stopped")
    promoted = await _until_promoted(cluster, replica)
    stack.note(f"replica {replica.port} promoted; every slot served")
    cluster.start_node(master)
    await cluster.wait_ok()
    await cluster.wait_replicas_linked()
    rejoined = time.monotonic() - killed
    roles = await cluster.roles()
    stack.note(f"old master {master.port} restarted: {roles.get(master.port)}, linked")
    if roles.get(master.port) != "slave":
        raise RuntimeError(f"the old master came back as {roles.get(master.port)}, not a replica")
    client = stack.client()
    try:
        async with LeaseWatch(stack).running() as watch:
            taken = await _until(lambda: _took_over(stack, client, a.name), 4 * CLUSTER_LEASE_S)
            stack.note(f"flusher-b holds every shard: {taken is not None}")
            # What flusher-a had read is claimed once idle longer than a lease; a batch it holds
            # inside an open transaction keeps the shard's fencing row locked, and that
            # takeover waiting, until it is resumed.
            await _until(lambda: _holds_nothing(stack, client, a.name), CLUSTER_LEASE_S + 5)
            left = await _pending_on(stack, client, a.name)
            a.resume()
            stack.note(f"flusher-a SIGCONT with {left} entries still pending on it")
            back = await _until(lambda: _holds_some(stack, client, a.name), 4 * CLUSTER_LEASE_S)
            stack.note(f"flusher-a holds shards again: {back is not None}")
    finally:
        a.resume()
        await client.aclose()
    messages, toggles = _acked_on(load, victim, stopped + ACK_IN_FLIGHT_S, killed)
    during = _errors_since(load, errors)
    return {
        "takeover_s": taken if taken is not None else -1,
        "left_on_a": left,
        "rejoined_s": back if back is not None else -1,
        "shard_moves": watch.moves,
        "fenced_batches": _fenced_batches(stack) - fenced_before,
        "repl_lag_p50_ms": lags[len(lags) // 2] * 1000,
        "repl_lag_max_ms": lags[-1] * 1000,
        "promoted_s": promoted,
        "replica_linked_s": rejoined,
        "acked_on_master_alone_msgs": messages,
        "acked_on_master_alone_likes": toggles,
        **_refusals(during),
    }


async def _took_over(stack: ChaosStack, client: redis.Redis, name: str) -> bool:
    """Other flushers hold every shard's lease."""
    holders = await stack.lease_holders(client)
    return all(h is not None and h != name for h in holders.values())


async def _pending_on(stack: ChaosStack, client: redis.Redis, name: str) -> int:
    """Entries `name` has read and not acknowledged, messages and likes."""
    return sum([await stack.held_by(client, name, group) for group in (LIKE_GROUP, MESSAGE_GROUP)])


async def _holds_nothing(stack: ChaosStack, client: redis.Redis, name: str) -> bool:
    return await _pending_on(stack, client, name) == 0


async def _holds_some(stack: ChaosStack, client: redis.Redis, name: str) -> bool:
    return name in (await stack.lease_holders(client)).values()


async def _both_hold_shards(stack: ChaosStack, client: redis.Redis) -> bool:
    holders = set((await stack.lease_holders(client)).values())
    return {"flusher-a", "flusher-b"} <= holders


async def _redirects(cluster: LocalCluster) -> Counter[str]:
    """MOVED, ASK and TRYAGAIN replies the running nodes have sent so far (INFO errorstats)."""
    seen: Counter[str] = Counter()
    for node in cluster.nodes:
        if not node.running:
            continue
        client = cluster.node_client(node)
        try:
            stats = await client.info("errorstats")
        finally:
            await client.aclose()
        for kind in ("MOVED", "ASK", "TRYAGAIN"):
            seen[kind] += int(stats.get(f"errorstat_{kind}", {}).get("count", 0))
    return seen


def _slots_to_carry(ranges: list[tuple[int, int]]) -> int | None:
    """How many of a master's lowest slots (what redis-cli --cluster reshard moves first) carry
    at least one message shard and one like shard, RESHARD_SLOTS at least; None: it serves no
    message shard or no like shard."""
    slots = [slot for a, b in ranges for slot in range(a, b + 1)]
    index = {slot: i for i, slot in enumerate(slots)}
    firsts = []
    for family in (MESSAGE_STREAMS.all_streams(), LIKE_STREAMS.all_streams()):
        found = [index[_slot(key)] for key in family if _slot(key) in index]
        if not found:
            return None
        firsts.append(min(found))
    return max(RESHARD_SLOTS, max(firsts) + 1)


async def _move(
    stack: ChaosStack, cluster: LocalCluster, source: int, target: int, count: int
) -> tuple[float, list[str]]:
    """Reshard `count` slots from master `source` to `target`; seconds, and the streams moved."""
    before = _owners(await _slot_ranges(cluster))
    started = time.monotonic()
    stack.note(f"reshard: {count} slots {source} → {target}")
    await cluster.reshard(_node(cluster, source), _node(cluster, target), count)
    took = time.monotonic() - started
    await cluster.wait_ok()
    after = _owners(await _slot_ranges(cluster))
    moved = sorted(k for k in STREAM_KEYS if before[k] == source and after[k] == target)
    stack.note(f"reshard done in {took:.1f} s, moved {', '.join(moved)}")
    families = {k in MESSAGE_STREAMS.all_streams() for k in moved}
    if families != {True, False}:
        raise RuntimeError(f"the reshard moved {moved}: not a message and a like shard")
    return took, moved


async def reshard_under_load(stack: ChaosStack, load: Load) -> dict[str, float]:
    """redis-cli --cluster reshard, twice, while the load flows: slots carrying a message shard
    and a like shard move from one master to a second, then on to the third. Writes to a slot
    being migrated are redirected (ASK, then MOVED once it has moved) and followed by the
    clients; every stream, its consumer group and its pending entries move with their slot. Two
    flushers consume meanwhile: the leases, their epoch counters and the failure counts move with
    their shards' slots too."""
    cluster = stack.the_cluster()
    errors = Counter(load.ledger.errors)
    redirects = await _redirects(cluster)
    ranges = await _slot_ranges(cluster)
    needed = {port: _slots_to_carry(r) for port, r in ranges.items()}
    candidates = {port: n for port, n in needed.items() if n is not None}
    if not candidates:
        raise RuntimeError("no master serves both a message shard and a like shard")
    first = min(sorted(candidates), key=lambda port: candidates[port])
    # The second master is the one whose own slots are the highest: the moved slots become its
    # lowest, so the second reshard carries them on to the third master.
    second = max((p for p in ranges if p != first), key=lambda port: ranges[port][0][0])
    third = next(p for p in ranges if p not in (first, second))
    took_1, moved_1 = await _move(stack, cluster, first, second, candidates[first])
    await asyncio.sleep(1.0)
    count_2 = _slots_to_carry((await _slot_ranges(cluster))[second])
    if count_2 is None:
        raise RuntimeError("the second master serves no message shard or no like shard")
    took_2, moved_2 = await _move(stack, cluster, second, third, count_2)
    during = _errors_since(load, errors)
    # Every client that reached a moved slot was redirected: the services' (following them), the
    # flusher's and redis-cli's own.
    replies = await _redirects(cluster) - redirects
    return {
        "slots_moved": candidates[first] + count_2,
        "shards_moved": len(moved_1) + len(moved_2),
        "reshard_s": took_1 + took_2,
        "moved_replies": replies["MOVED"],
        "ask_replies": replies["ASK"],
        "tryagain_replies": replies["TRYAGAIN"],
        **_refusals(during),
    }


# Many users in the middle of their toggles at any moment: what a stale batch would overwrite.
TOGGLING = LikePlan(senders=24, pause=0.03)
CLUSTER_FAILOVER = "kill -9 a Redis Cluster master (failover, WAIT 1)"
CLUSTER_RESHARD = "reshard a Redis Cluster under load (WAIT 1)"
MODE_SWITCH = "LIKES_MODE switched under load (pods of two modes, restarts)"
NOISY_ACCOUNT = "one account at 20x the rate of 50 others, drain below their sum (fair shares)"


def on_the_cluster(inject: Fault) -> Scenario:
    """A scenario on the local Redis Cluster: two flushers with the cluster's lease and backlog
    bound, writes acknowledged once a replica has them."""
    return Scenario(
        inject,
        flushers=2,
        flusher_env=(CLUSTER_LEASE, CLUSTER_LEASE),
        queue_max=CLUSTER_QUEUE_MAX,
        redis_cluster=True,
        wait_replicas=1,
    )


FAULTS: dict[str, Scenario] = {
    "kill -9 ingest": Scenario(kill_ingest),
    "kill -9 flusher mid-batch (before COMMIT)": Scenario(kill_flusher_mid_batch),
    "kill -9 flusher between COMMIT and ACK": Scenario(kill_flusher_after_commit),
    "kill -9 Redis + restart (AOF, fsync always)": Scenario(kill_redis),
    "kill -9 MariaDB mid-batch (crash recovery)": Scenario(kill_mariadb),
    "kill -9 PostgreSQL mid-batch (crash recovery)": Scenario(kill_postgres),
    "flusher stopped until the backlog bound": Scenario(stall_flusher, queue_max=4_000),
    "two flushers, forced rebalance": Scenario(rebalance, flushers=2),
    "flusher SIGSTOPped past its lease": Scenario(
        freeze_past_lease,
        flushers=2,
        own_pg_proxy=("a",),
        likes=TOGGLING,
    ),
    "blackhole MySQL": Scenario(blackhole_mysql, proxied=True),
    "blackhole PostgreSQL": Scenario(blackhole_postgres, proxied=True),
    "blackhole Redis": Scenario(blackhole_redis, proxied=True),
    "Redis at maxmemory": Scenario(redis_full),
    "grant revoked and restored": Scenario(revoke_grants),
    MODE_SWITCH: Scenario(mode_switch.switch_modes, flusher_env=(mode_switch.FLUSHER_ENV,)),
    NOISY_ACCOUNT: Scenario(
        noisy_account.noisy_account,
        flusher_env=(noisy_account.FLUSHER_ENV,),
        queue_max=noisy_account.QUEUE_MAX,
        message_senders=0,
    ),
    CLUSTER_FAILOVER: on_the_cluster(fail_over_master),
    CLUSTER_RESHARD: on_the_cluster(reshard_under_load),
}
# make test's rows (its 20-minute budget); make chaos runs every row. The backlog bound, the
# cluster's failover and a paused flusher's takeover have deterministic tests in make test
# (test_backlog_fairness.py, test_lease_faults.py, test_slots.py's WAIT, test_fencing.py).
QUICK = (
    "kill -9 ingest",
    "kill -9 flusher between COMMIT and ACK",
    "kill -9 Redis + restart (AOF, fsync always)",
)
