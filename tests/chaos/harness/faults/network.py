"""The network cut: one datastore blackholed by its proxy for longer than every deadline, then
healed."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.chaos.harness.faults.scenario import errors_since
from tests.chaos.harness.load import Load
from tests.chaos.harness.stack import ChaosStack

# Longer than every datastore deadline of the chaos stack (2 s), so each call in flight fails.
BLACKHOLE_S = 8.0


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
    during = errors_since(load, errors)
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
