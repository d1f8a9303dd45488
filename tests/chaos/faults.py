"""The faults, each injected at a chosen point and healed the way an orchestrator would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from services.runtime.mysql import MysqlDatabase
from tests.chaos.stack import ChaosStack

ROOT = Path(__file__).resolve().parents[2]
Fault = Callable[[ChaosStack], Awaitable[dict[str, float]]]


async def kill_ingest(stack: ChaosStack) -> dict[str, float]:
    ingest = stack.services["ingest"]
    ingest.kill()
    await asyncio.sleep(0.5)
    await ingest.start()
    await ingest.healthy()
    return {}


async def _flusher_fault(stack: ChaosStack, point: str) -> dict[str, float]:
    flusher = stack.services["flusher"]
    flusher.kill()
    await flusher.start(FAULT_POINT=point)
    code = await flusher.exited(30)
    if code is None:
        raise RuntimeError(f"the flusher never reached fault point {point}")
    await flusher.start()
    await flusher.healthy()
    return {}


async def kill_flusher_mid_batch(stack: ChaosStack) -> dict[str, float]:
    """SIGKILL inside a write transaction, just before COMMIT."""
    return await _flusher_fault(stack, "before_commit")


async def kill_flusher_after_commit(stack: ChaosStack) -> dict[str, float]:
    """SIGKILL after COMMIT, before XACK + XDEL."""
    return await _flusher_fault(stack, "after_commit")


async def kill_redis(stack: ChaosStack) -> dict[str, float]:
    stack.kill_redis()
    await asyncio.sleep(0.5)
    await stack.start_redis()
    return {}


async def _supervised_datastore(name: str, ready: Callable[[], Awaitable[bool]]) -> None:
    """kill -9 a datastore of the local stack; supervisord restarts it (autorestart)."""
    supervisorctl = [
        str(ROOT / ".venv/bin/supervisorctl"),
        "-c",
        str(ROOT / "var/supervisord.conf"),
    ]
    proc = await asyncio.create_subprocess_exec(
        *supervisorctl, "signal", "KILL", f"datastores:{name}", stdout=asyncio.subprocess.DEVNULL
    )
    await proc.wait()
    deadline = time.monotonic() + 120
    await asyncio.sleep(1)
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if await ready():
                return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{name} did not come back")


async def kill_mariadb(stack: ChaosStack) -> dict[str, float]:
    e = os.environ
    url = f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@127.0.0.1:{e['MYSQL_PORT']}/agora_test"

    async def ready() -> bool:
        db = await MysqlDatabase.connect(url)
        try:
            return await db.fetchone("SELECT 1") == (1,)
        finally:
            await db.close()

    await _supervised_datastore("mariadb", ready)
    return {}


async def kill_postgres(stack: ChaosStack) -> dict[str, float]:
    e = os.environ
    url = f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}/agora_test"

    async def ready() -> bool:
        conn = await asyncpg.connect(url)
        try:
            return bool(await conn.fetchval("SELECT 1") == 1)
        finally:
            await conn.close()

    await _supervised_datastore("postgres", ready)
    return {}


async def stall_flusher(stack: ChaosStack, seconds: float = 6) -> dict[str, float]:
    """Stop the flusher until the ingest backlog bound is hit, then bring it back."""
    flusher = stack.services["flusher"]
    await flusher.stop()
    client = stack.client()
    peak = 0.0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            info = await client.info("memory")
            peak = max(peak, float(info["used_memory"]))
            await asyncio.sleep(0.2)
        backlog = float(await client.get("agora:msg:backlog") or 0)
    finally:
        await client.aclose()
    await flusher.start()
    await flusher.healthy()
    return {"backlog_at_bound": backlog, "redis_peak_mib": peak / 2**20}


FAULTS: dict[str, Fault] = {
    "kill -9 ingest": kill_ingest,
    "kill -9 flusher mid-batch (before COMMIT)": kill_flusher_mid_batch,
    "kill -9 flusher between COMMIT and ACK": kill_flusher_after_commit,
    "kill -9 Redis + restart (AOF, fsync always)": kill_redis,
    "kill -9 MariaDB mid-batch (crash recovery)": kill_mariadb,
    "kill -9 PostgreSQL mid-batch (crash recovery)": kill_postgres,
    "flusher stopped until the backlog bound": stall_flusher,
}
QUICK = (
    "kill -9 ingest",
    "kill -9 flusher between COMMIT and ACK",
    "kill -9 Redis + restart (AOF, fsync always)",
    "flusher stopped until the backlog bound",
)
