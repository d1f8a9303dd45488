"""The bench's CPU accounting: a server's work counts wherever it runs below the listening
process (PostgreSQL does its queries in forked backends), and not in the load generator."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest

from bench.cpu import LOAD, cpu_spent, listening_pids

# Listens on the port it is given, then forks a child that burns CPU until told to stop.
_SERVER = textwrap.dedent(
    """
    import os, socket, sys, time
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    sys.stdin.readline()
    if os.fork() == 0:
        end = time.process_time() + float(sys.argv[1])
        while time.process_time() < end:
            pass
        os._exit(0)
    os.wait()
    print("done", flush=True)
    sys.stdin.readline()
    """
)


def test_a_forked_worker_s_cpu_is_the_server_s_not_the_load_generator_s() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, "0.3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        port = int(server.stdout.readline())
        pids = listening_pids(port)
        assert pids == {server.pid}
        started = time.perf_counter()
        with cpu_spent({"server": pids}) as spent:
            server.stdin.write("go\n")
            server.stdin.flush()
            assert server.stdout.readline().strip() == "done"
        assert spent.wall_seconds >= time.perf_counter() - started - 0.05
        # The child was born and ended inside the block: gone from /proc by the end, its CPU is
        # in the server's time for the children it waited for.
        assert spent.seconds["server"] >= 0.25
        assert spent.seconds[LOAD] < 0.2
        cost = spent.per(100)
        assert cost.per_unit_ms["server"] >= 2.5  # ms per unit
        assert 0 < cost.cores_busy <= 2
    finally:
        server.kill()
        server.wait()


def test_nobody_listening_is_an_error_that_names_the_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening
    with pytest.raises(SystemExit, match=f"port {port}"):
        listening_pids(port)
