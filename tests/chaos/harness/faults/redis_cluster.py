"""Redis Cluster faults: a master killed and its replica promoted, and slots resharded under load,
each with two flushers whose leases and fencing move with the shards."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter

import redis.asyncio as redis
from redis.crc import key_slot

from services.runtime.redis_client import REDIS_ERRORS
from services.streams.likes import GROUP as LIKE_GROUP
from services.streams.messages import GROUP as MESSAGE_GROUP
from tests.chaos.harness.faults.scenario import Fault, Scenario, errors_since
from tests.chaos.harness.faults.watching import LeaseWatch, fenced_batches, until_holds
from tests.chaos.harness.load import CHAOS_ACCOUNT, Load, thread_of
from tests.chaos.harness.shards import LIKE_STREAMS, MESSAGE_STREAMS
from tests.chaos.harness.stack import ChaosStack
from tools.redis_cluster import LocalCluster, Node

# The stream shards' keys, whose hash slots decide which master serves them.
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
        shared = await until_holds(lambda: _both_hold_shards(stack, client), 3 * CLUSTER_LEASE_S)
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
    fenced_before = fenced_batches(stack)
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
            taken = await until_holds(
                lambda: _took_over(stack, client, a.name), 4 * CLUSTER_LEASE_S
            )
            stack.note(f"flusher-b holds every shard: {taken is not None}")
            # What flusher-a had read is claimed once idle longer than a lease; a batch it holds
            # inside an open transaction keeps the shard's fencing row locked, and that
            # takeover waiting, until it is resumed.
            await until_holds(lambda: _holds_nothing(stack, client, a.name), CLUSTER_LEASE_S + 5)
            left = await _pending_on(stack, client, a.name)
            a.resume()
            stack.note(f"flusher-a SIGCONT with {left} entries still pending on it")
            back = await until_holds(
                lambda: _holds_some(stack, client, a.name), 4 * CLUSTER_LEASE_S
            )
            stack.note(f"flusher-a holds shards again: {back is not None}")
    finally:
        a.resume()
        await client.aclose()
    messages, toggles = _acked_on(load, victim, stopped + ACK_IN_FLIGHT_S, killed)
    during = errors_since(load, errors)
    return {
        "takeover_s": taken if taken is not None else -1,
        "left_on_a": left,
        "rejoined_s": back if back is not None else -1,
        "shard_moves": watch.moves,
        "fenced_batches": fenced_batches(stack) - fenced_before,
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
    during = errors_since(load, errors)
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
