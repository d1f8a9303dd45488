"""Fixtures shared by the Redis Cluster tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tools.redis_cluster import LocalCluster


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster() -> AsyncIterator[LocalCluster]:
    """A local cluster of three masters with a replica each, one per test module: a module's
    failovers and reshards do not reach the next one."""
    local = LocalCluster()
    await local.start()
    yield local
    local.stop()
