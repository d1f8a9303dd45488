"""A throwaway local Redis Cluster from Debian's redis-server: three masters, one replica each.

The chaos suite and the benchmarks start one per run (in a temporary directory, on free ports)
to fail a master over or move slots under load; `make up REDIS=cluster` runs a long-lived one
under supervisord (deploy/local/stack.sh).

python -m tools.redis_cluster [--masters 3] [--replicas 1]  (starts one, prints its URL, waits)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster

from tools import ports, redis_server
from tools.waiting import until


def free_port() -> int:
    """A loopback port whose cluster bus port (+10000) is free too, both below ephemeral ones."""
    return ports.free_port(low=18_000, high=22_767, also_free=10_000)


@dataclass
class Node:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalCluster:
    """Masters with `replicas` replicas each, AOF with fsync always, noeviction."""

    masters: int = 3
    replicas: int = 1
    password: str | None = None
    # Seconds a master may be unreachable before its replica is promoted.
    node_timeout_ms: int = 2_000
    aof: bool = True
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redis-cluster-")))
    nodes: list[Node] = field(default_factory=list)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.nodes[0].address}/0"

    def client(self, **options: object) -> RedisCluster:
        return RedisCluster.from_url(self.url, **options)

    def node_client(self, node: Node) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port, password=self.password)

    def _args(self, node: Node) -> list[str]:
        args = [
            # As the local stack runs Redis (noeviction, AOF with fsync always), on loopback.
            *redis_server.argv(
                node.directory,
                "--appendonly",
                "yes" if self.aof else "no",
                port=node.port,
                stack_conf=True,
            ),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            # A replica syncs at once (the default waits 5 s for more replicas to share the
            # transfer): with WAIT 1, writes are refused until it has.
            "--repl-diskless-sync-delay",
            "0",
        ]
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        return args

    async def start(self) -> None:
        count = self.masters * (1 + self.replicas)
        for _ in range(count):
            port = free_port()
            directory = self.root / str(port)
            directory.mkdir(parents=True)
            self.nodes.append(Node(port, directory))
        for node in self.nodes:
            self.start_node(node)
        for node in self.nodes:
            await self._wait_ping(node)
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        create = await asyncio.create_subprocess_exec(
            "redis-cli",
            *auth,
            "--cluster",
            "create",
            *(n.address for n in self.nodes),
            "--cluster-replicas",
            str(self.replicas),
            "--cluster-yes",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await create.communicate()
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.decode()[-2000:]}")
        await self.wait_ok()
        await self.wait_replicas_linked()

    def start_node(self, node: Node) -> None:
        log = (node.directory / "redis.log").open("ab")
        node.process = subprocess.Popen(  # noqa: S603 (redis-server, our arguments)
            self._args(node), stdout=log, stderr=subprocess.STDOUT, cwd=node.directory
        )

    async def _wait_ping(self, node: Node, seconds: float = 20) -> None:
        client = self.node_client(node)
        try:
            await redis_server.ready(client, f"Redis node {node.address}", seconds)
        finally:
            await client.aclose()

    async def cluster_info(self, node: Node) -> dict[str, str]:
        client = self.node_client(node)
        try:
            raw = await client.execute_command("CLUSTER", "INFO")
        finally:
            await client.aclose()
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return dict(
            line.split(":", 1) for line in text.splitlines() if ":" in line and line.strip()
        )

    async def wait_ok(self, seconds: float = 30) -> None:
        """Every running node says cluster_state:ok and agrees that every slot is served."""

        async def every_slot_served() -> bool:
            states = []
            for node in self.nodes:
                if node.running:
                    with contextlib.suppress(redis.RedisError):
                        states.append(await self.cluster_info(node))
            return bool(states) and all(
                s.get("cluster_state") == "ok" and s.get("cluster_slots_ok") == "16384"
                for s in states
            )

        await until(
            "the local Redis Cluster to reach cluster_state:ok",
            every_slot_served,
            seconds,
            every=0.1,
        )

    async def wait_replicas_linked(self, seconds: float = 30) -> None:
        """Every running replica has finished its sync with its master (WAIT can count it)."""

        async def linked() -> bool:
            links = []
            for node in self.nodes:
                if not node.running:
                    continue
                client = self.node_client(node)
                try:
                    with contextlib.suppress(redis.RedisError):
                        info = await client.info("replication")
                        if info.get("role") == "slave":
                            links.append(info.get("master_link_status") == "up")
                finally:
                    await client.aclose()
            return bool(links) and all(links)

        await until(
            "the local Redis Cluster's replicas to finish their sync", linked, seconds, every=0.1
        )

    async def roles(self) -> dict[int, str]:
        """port → 'master' / 'slave' of every running node, as the node itself says."""
        out: dict[int, str] = {}
        for node in self.nodes:
            if not node.running:
                continue
            client = self.node_client(node)
            try:
                with contextlib.suppress(redis.RedisError):
                    reply = await client.execute_command("ROLE")
                    role = reply[0]
                    out[node.port] = role.decode() if isinstance(role, bytes) else str(role)
            finally:
                await client.aclose()
        return out

    async def master_of(self, key: str) -> Node:
        """The node serving `key`'s slot now."""
        client = self.client()
        try:
            await client.initialize()
            served = client.get_node_from_key(key)
        finally:
            await client.aclose()
        if served is None:
            raise RuntimeError(f"no node serves {key!r}")
        return next(n for n in self.nodes if n.port == served.port)

    def kill(self, node: Node) -> None:
        if node.process and node.process.poll() is None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()

    async def reshard(self, source: Node, target: Node, slots: int) -> None:
        """Move `slots` slots from `source` to `target` (redis-cli --cluster reshard), live."""
        ids = {}
        for node in (source, target):
            client = self.node_client(node)
            try:
                raw = await client.execute_command("CLUSTER", "MYID")
            finally:
                await client.aclose()
            ids[node.port] = raw.decode() if isinstance(raw, bytes) else str(raw)
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        proc = await asyncio.create_subprocess_exec(
            "redis-cli",
            *auth,
            "--cluster",
            "reshard",
            source.address,
            "--cluster-from",
            ids[source.port],
            "--cluster-to",
            ids[target.port],
            "--cluster-slots",
            str(slots),
            "--cluster-yes",
            "--cluster-pipeline",
            "100",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster reshard failed: {out.decode()[-2000:]}")

    def stop(self) -> None:
        for node in self.nodes:
            self.kill(node)
        shutil.rmtree(self.root, ignore_errors=True)


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--password", default=None)
    args = parser.parse_args()
    cluster = LocalCluster(args.masters, args.replicas, args.password)
    try:
        await cluster.start()
        print(cluster.url, flush=True)
        await asyncio.Event().wait()
    finally:
        cluster.stop()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())
