"""The Redis Cluster component's scripts, run: start.sh (a node's nodes.conf follows its peers'
current addresses) and bootstrap.sh (forms the cluster once, and mends it), against local
redis-server processes (redis_cluster_nodes.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.k8s_support import REDIS_CLUSTER
from tests.deploy.redis_cluster_nodes import (
    DOMAIN,
    NODES,
    PASSWORD,
    Nodes,
    assert_formed,
    node_ids,
    require,
    write_shims,
)
from tools.redis_cluster import free_port
from tools.waiting import until_sync


def test_start_points_nodes_conf_at_the_peers_current_addresses(tmp_path: Path) -> None:
    require("sh", "cmp")
    ids = [f"{n:040x}" for n in range(1, 6)]
    names_ = [f"redis-{n}.redis.agora-dev.svc" for n in range(5)]
    conf = tmp_path / "nodes.conf"
    conf.write_text(
        f"{ids[0]} 10.0.0.10:6379@16379,{names_[0]},shard-id=a1,tcp-port=6379 myself,master - "
        "0 0 1 connected 0-5460\n"
        f"{ids[1]} 10.0.0.11:6379@16379,{names_[1]},shard-id=b2 master - 0 1700 2 connected "
        "5461-10922\n"
        f"{ids[2]} 10.0.0.12:6379@16379,{names_[2]},shard-id=c3 slave {ids[1]} 0 1700 2 "
        "connected\n"
        f"{ids[3]} 10.0.0.13:6379@16379,,shard-id=d4 slave {ids[0]} 0 1700 1 connected\n"
        f"{ids[4]} 10.0.0.14:6379@16379,{names_[4]} master - 0 1700 3 connected 10923-16383\n"
        "vars currentEpoch 6 lastVoteEpoch 0\n"
    )
    # redis-0 and redis-4 came back elsewhere (one over IPv6); redis-2 does not resolve (yet).
    bin_ = write_shims(
        tmp_path / "bin", {names_[0]: "10.1.0.20", names_[1]: "10.0.0.11", names_[4]: "fd00::24"}
    )
    server = bin_ / "redis-server"
    server.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$CAPTURE.args"\ncat >"$CAPTURE.stdin"\n')
    server.chmod(0o755)
    capture = tmp_path / "capture"
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "REDIS_NODES_CONF": str(conf),
        "REDIS_PASSWORD": PASSWORD,
        "REDIS_RESOLVE_TRIES": "1",
        "CAPTURE": str(capture),
    }
    args = ["--cluster-enabled", "yes", "--save", ""]
    run = subprocess.run(
        ["sh", str(REDIS_CLUSTER / "start.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "refreshed" in run.stdout
    lines = conf.read_text().splitlines()
    assert lines[0] == (
        f"{ids[0]} 10.1.0.20:6379@16379,{names_[0]},shard-id=a1,tcp-port=6379 myself,master - "
        "0 0 1 connected 0-5460"
    )
    assert lines[1].startswith(f"{ids[1]} 10.0.0.11:6379@16379,{names_[1]},shard-id=b2 master")
    assert lines[2].startswith(f"{ids[2]} 10.0.0.12:6379@16379,{names_[2]},")
    assert lines[3].startswith(f"{ids[3]} 10.0.0.13:6379@16379,,shard-id=d4 ")
    assert lines[4] == (
        f"{ids[4]} fd00::24:6379@16379,{names_[4]} master - 0 1700 3 connected 10923-16383"
    )
    assert lines[5] == "vars currentEpoch 6 lastVoteEpoch 0"
    assert len(lines) == 6
    # redis-server gets the arguments as given, and the masterauth on stdin alone.
    assert capture.with_suffix(".args").read_text().splitlines() == [*args, "-"]
    assert capture.with_suffix(".stdin").read_text() == f'masterauth "{PASSWORD}"\n'
    # A node's first start: no nodes.conf, none written.
    conf.unlink()
    subprocess.run(
        ["sh", str(REDIS_CLUSTER / "start.sh")], env=env, timeout=30, check=True, text=True
    )
    assert not conf.exists()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    require("redis-server", "redis-cli", "sh")
    local = Nodes(tmp_path, [free_port() for _ in range(NODES)])
    try:
        for n in range(NODES):
            local.start(n)
        yield local
    finally:
        for process in local.processes.values():
            process.kill()
            process.wait(timeout=10)


def test_bootstrap_forms_the_cluster_once(nodes: Nodes) -> None:
    first = nodes.bootstrap()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "forming the cluster" in first.stdout
    assert_formed(nodes)
    # Clients are sent to the names the nodes announce.
    assert f"node0.{DOMAIN}" in nodes.cli(0, "cluster", "slots")
    ids, epoch = node_ids(nodes), nodes.info(0)["cluster_current_epoch"]
    # Run again: it finds the cluster formed and changes nothing.
    again = nodes.bootstrap()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the cluster is formed" in again.stdout
    assert "forming" not in again.stdout
    assert "CLUSTER MEET" not in again.stdout
    assert node_ids(nodes) == ids
    assert nodes.info(0)["cluster_current_epoch"] == epoch
    assert_formed(nodes)


def test_a_restarted_node_rejoins_with_its_nodes_conf(nodes: Nodes) -> None:
    assert nodes.bootstrap().returncode == 0
    before = node_ids(nodes)
    nodes.stop(4)
    nodes.start(4)
    until_sync("node4 back in the cluster", lambda: nodes.info(4).get("cluster_state") == "ok", 15)
    assert node_ids(nodes) == before
    again = nodes.bootstrap()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the cluster is formed" in again.stdout
    assert_formed(nodes)


def test_bootstrap_adds_a_node_that_lost_its_volume(nodes: Nodes) -> None:
    assert nodes.bootstrap().returncode == 0
    masters = [n for n, role in enumerate(nodes.roles()) if role == "master"]
    lost = masters[1]
    old = nodes.cli(lost, "cluster", "myid")
    nodes.stop(lost)
    shutil.rmtree(nodes.root / f"node{lost}")
    nodes.start(lost)
    result = nodes.bootstrap()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"without data on: node{lost}.{DOMAIN}" in result.stdout
    assert f"CLUSTER FORGET {old}" in result.stdout
    assert_formed(nodes)
    # The fresh node serves as a replica; the identity it replaced is gone.
    assert nodes.roles()[lost] == "slave"
    assert old not in nodes.cli(0, "cluster", "nodes")


def test_bootstrap_leaves_a_partly_formed_cluster_alone(nodes: Nodes) -> None:
    # Two nodes that know each other, no slot assigned (a create interrupted half-way): neither
    # fresh nor formed.
    assert nodes.cli(2, "cluster", "meet", "127.0.0.1", str(nodes.ports[3])) == "OK"
    until_sync("node3 to know node2", lambda: nodes.info(3)["cluster_known_nodes"] == "2")
    result = nodes.bootstrap()
    assert result.returncode == 1
    assert "partly formed" in result.stderr
    assert re.search(r"node2\.test \(\S+\): slots assigned 0, nodes known 2", result.stdout)
    # Nothing was done.
    known = [nodes.info(n)["cluster_known_nodes"] for n in range(NODES)]
    assert known == ["1", "1", "2", "2", "1", "1"]
    assert all(nodes.info(n)["cluster_slots_assigned"] == "0" for n in range(NODES))
