"""Processes killed: a service with SIGKILL (at a fault point of its own, for the flusher), the
scenario's Redis, and the local stack's MariaDB and PostgreSQL, which supervisord restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

from services.runtime.mysql import MysqlDatabase
from tests.chaos.harness.load import Load
from tests.chaos.harness.local_stack import mysql_admin_url, pg_admin_url, supervisorctl
from tests.chaos.harness.stack import ChaosStack
from tools.waiting import until


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
