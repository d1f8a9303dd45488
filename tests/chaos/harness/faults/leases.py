"""The flushers' shard leases: shards rebalanced as replicas come and go, and a replica frozen
past its lease while another takes its shards over (what fencing is for)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as redis

from tests.chaos.harness.faults.watching import LeaseWatch, fenced_batches, until_holds
from tests.chaos.harness.load import Load
from tests.chaos.harness.proxy import ProxyProcess
from tests.chaos.harness.service import Service
from tests.chaos.harness.shards import LIKE_STREAMS
from tests.chaos.harness.stack import LEASE_TTL_MS, ChaosStack

LEASE_S = LEASE_TTL_MS / 1000
LIKE_SHARDS = frozenset(LIKE_STREAMS.all_streams())


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
    fenced_before = fenced_batches(stack)
    figures: dict[str, float] = {}
    client = stack.client()
    try:
        # 1. A batch in memory. A try where flusher-a lost its leases while stalled (its
        # supervisor busy elsewhere) shows nothing: its consumers stop, their batches dropped.
        for attempt in range(1, 4):
            await until_holds(lambda: _both_hold_like_shards(stack, client), 6 * LEASE_S)
            figures = await _stale_batch(stack, client, a, proxy)
            figures["attempts"] = attempt
            if figures["kept"]:
                break

        # 2. Inside a transaction, its locks held while stopped.
        rejoined = await until_holds(lambda: _holds_like_shard(stack, client, a.name), 6 * LEASE_S)
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
    figures["fenced_batches"] = fenced_batches(stack) - fenced_before
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
    stalled = await until_holds(lambda: _stalled(stack, a), 3 * LEASE_S, every=0.05)
    await asyncio.sleep(LEASE_S)  # retrying, alive: it keeps renewing its leases
    flushed, failed = await _like_counters(a)  # nothing reaches PostgreSQL from here to SIGCONT
    a.pause()
    kept = await _holds_all(stack, client, a.name, list(hand))
    held = await stack.held_by(client, a.name)
    stack.note(f"stalled={stalled is not None}, leases kept={kept}; SIGSTOP holding {held}")
    took = await until_holds(
        lambda: _holds_all(stack, client, "flusher-b", list(hand)), 6 * LEASE_S, every=0.05
    )
    stack.note(f"flusher-b holds those shards: {took is not None}")
    claimed = await until_holds(lambda: _holds_none(stack, client, a.name), 4 * LEASE_S)
    stack.note(f"flusher-b claimed what flusher-a held: {claimed is not None}")
    # flusher-b applies what it claimed and what came after. Its transactions lock the same hot
    # post rows the stale batch needs: wait for it to catch up, so that batch is not held up
    # behind them (past a lease its own supervisor cancels it, and it shows nothing).
    await asyncio.sleep(1.0)
    caught_up = await until_holds(lambda: _likes_waiting_below(client, 50), 3 * LEASE_S, every=0.05)
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
