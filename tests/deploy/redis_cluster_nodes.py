"""Local cluster-enabled redis-servers, each started by the Redis Cluster component's start.sh as a
pod would be, and checks of the cluster they form: what the tests of the component's scripts
share."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.k8s_support import REDIS_CLUSTER, REDIS_CLUSTER_NODES
from tools.waiting import until_sync

NODES = REDIS_CLUSTER_NODES  # as many local nodes as the component runs

PASSWORD = "test-cluster-password"
DOMAIN = "test"  # the local nodes' names: node<n>.test, resolved by the getent shim


def require(*tools: str) -> None:
    """`make test` installs these (deploy/local/stack.sh): their absence is a broken set-up,
    not a reason to prove nothing."""
    missing = [t for t in tools if shutil.which(t) is None]
    assert not missing, f"not installed: {', '.join(missing)} (run the tests with `make test`)"


def write_shims(directory: Path, hosts: dict[str, str]) -> Path:
    """A getent that resolves the given names only (the pods' DNS, in the test)."""
    directory.mkdir(parents=True, exist_ok=True)
    cases = "".join(f'  {name}) echo "{ip}       {name}" ;;\n' for name, ip in hosts.items())
    getent = directory / "getent"
    getent.write_text(
        f'#!/bin/sh\n[ "$1" = hosts ] || exit 1\ncase "$2" in\n{cases}  *) exit 2 ;;\nesac\n'
    )
    getent.chmod(0o755)
    return directory


@dataclass
class Nodes:
    """Six local cluster-enabled redis-servers, each started by start.sh as a pod would be."""

    root: Path
    ports: list[int] = field(default_factory=list)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        hosts = {f"node{n}.{DOMAIN}": "127.0.0.1" for n in range(NODES)}
        self.bin = write_shims(self.root / "bin", hosts)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "REDIS_PASSWORD": PASSWORD,
            **extra,
        }

    def start(self, n: int) -> None:
        directory = self.root / f"node{n}"
        directory.mkdir(exist_ok=True)
        port = self.ports[n]
        args = [
            *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)),
            *("--cluster-enabled", "yes", "--cluster-config-file", str(directory / "nodes.conf")),
            *("--cluster-node-timeout", "1000", "--cluster-announce-hostname", f"node{n}.{DOMAIN}"),
            *("--cluster-preferred-endpoint-type", "hostname", "--masteruser", "default"),
            *("--requirepass", PASSWORD, "--save", "", "--appendonly", "no"),
            *("--logfile", str(directory / "redis.log")),
        ]
        self.processes[n] = subprocess.Popen(
            ["sh", str(REDIS_CLUSTER / "start.sh"), *args],
            env=self.env(REDIS_NODES_CONF=str(directory / "nodes.conf"), REDIS_RESOLVE_TRIES="1"),
        )
        until_sync(f"node{n} to start", lambda: self.cli(n, "ping") == "PONG")

    def stop(self, n: int) -> None:
        process = self.processes.pop(n)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def cli(self, n: int, *command: str) -> str:
        run = subprocess.run(
            ["redis-cli", "-p", str(self.ports[n]), *command],
            env={**os.environ, "REDISCLI_AUTH": PASSWORD},
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return run.stdout.strip()

    def info(self, n: int) -> dict[str, str]:
        lines = self.cli(n, "cluster", "info").splitlines()
        return dict(line.strip().split(":", 1) for line in lines if ":" in line)

    def roles(self) -> list[str]:
        return [self.cli(n, "role").splitlines()[0] for n in range(NODES)]

    def bootstrap(self) -> subprocess.CompletedProcess[str]:
        nodes = " ".join(f"node{n}.{DOMAIN}:{self.ports[n]}" for n in range(NODES))
        return subprocess.run(
            ["sh", str(REDIS_CLUSTER / "bootstrap.sh")],
            env=self.env(REDIS_CLUSTER_NODES=nodes, REDIS_BOOTSTRAP_TIMEOUT="60"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def node_ids(nodes: Nodes) -> list[str]:
    return [nodes.cli(n, "cluster", "myid") for n in range(NODES)]


def assert_formed(nodes: Nodes) -> None:
    # Gossip carries a node the script just met to the others within a few pings: on a loaded
    # machine node 0 may still know five when the script returns, so wait for every node to
    # know all six (and say which did not, if they never do).
    def formed() -> bool:
        return all(
            nodes.info(n)["cluster_state"] == "ok"
            and nodes.info(n)["cluster_known_nodes"] == str(NODES)
            for n in range(NODES)
        )

    until_sync("every node to know all the others, the cluster ok", formed)
    until_sync(
        "three masters with a replica each",
        lambda: sorted(nodes.roles()) == ["master"] * 3 + ["slave"] * 3,
    )
