"""The tests' local Redis Cluster: its client, the cluster emptied first, and one node of it asked
directly (not through the cluster client): its replica, the process it runs, a setting changed on
it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as redis

from services.runtime import redis_client
from tools.redis_cluster import LocalCluster, Node


@asynccontextmanager
async def emptied(cluster: LocalCluster, **options: Any) -> AsyncIterator[redis.Redis]:
    """A client of the cluster (`options`: redis_client.connect's), every node emptied
    first; closed when the block ends."""
    connected = redis_client.connect(cluster.url, cluster=True, **options)
    await redis_client.flush_all(connected)
    try:
        yield connected
    finally:
        await connected.aclose()


@asynccontextmanager
async def on_node(cluster: LocalCluster, node: Node) -> AsyncIterator[redis.Redis]:
    """A client of that node alone, closed when the block ends."""
    client = cluster.node_client(node)
    try:
        yield client
    finally:
        await client.aclose()


async def replica_of(cluster: LocalCluster, master: Node) -> Node:
    async with on_node(cluster, master) as client:
        role: Any = await client.execute_command("ROLE")
    return next(n for n in cluster.nodes if n.port == int(role[2][0][1]))


async def run_id(cluster: LocalCluster, node: Node) -> str:
    """The id of the process the node runs (a restart or a replacement changes it)."""
    async with on_node(cluster, node) as client:
        info: Any = await client.info("server")
    return str(info["run_id"])


async def configure(cluster: LocalCluster, nodes: list[Node], name: str, value: str | int) -> None:
    """CONFIG SET on each of `nodes`."""
    for node in nodes:
        async with on_node(cluster, node) as client:
            await client.execute_command("CONFIG", "SET", name, value)
