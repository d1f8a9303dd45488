"""Several worker processes behind one port, for services whose CPU is the limit (one Python
process uses one core).

The parent starts WORKERS copies of the same command, each marked AGORA_WORKER=<i>. Every worker
binds the same ports with SO_REUSEPORT (grpc does by default; the gateway asks for it), and the
kernel spreads new connections over them. Metrics go through prometheus_client's multiprocess
mode: each worker writes its samples to files in a private directory and the parent serves the
sum on METRICS_PORT. A worker that exits takes the others down with it, so the orchestrator
(Kubernetes, supervisord) restarts one unit instead of running a silently smaller pool; SIGTERM
is passed on, so each worker drains as a single process would.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

WORKER_ENV = "AGORA_WORKER"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def count(setting: int) -> int:
    """Workers to run: the setting, or one per core this process may use when it is 0."""
    return setting or cores()


def cores() -> int:
    """CPUs available: the affinity mask, capped by a cgroup v2 CPU limit (a container's
    `resources.limits.cpu`, which os.cpu_count() does not see), at least 1."""
    available = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return max(available, 1)
    if quota != "max":
        available = min(available, math.ceil(int(quota) / int(period)))
    return max(available, 1)


def is_worker() -> bool:
    """True in a process the supervisor started."""
    return WORKER_ENV in os.environ


def index() -> int:
    return int(os.environ.get(WORKER_ENV, "0"))


async def supervise(workers: int, metrics_port: int | None, metrics_host: str) -> int:
    """Run `workers` copies of this process until they exit; returns the exit status."""
    metrics_dir = Path(tempfile.mkdtemp(prefix="agora-metrics-"))
    try:
        if metrics_port:
            _serve_aggregated_metrics(metrics_dir, metrics_port, metrics_host)
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                *sys.orig_argv[1:],
                env={**os.environ, WORKER_ENV: str(i), MULTIPROC_ENV: str(metrics_dir)},
                preexec_fn=_terminate_with_parent,
            )
            for i in range(workers)
        ]
        log.info("started %d workers: %s", workers, [c.pid for c in children])
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _forward, children, sig)
        waits = {asyncio.ensure_future(c.wait()): c for c in children}
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        first = waits[next(iter(done))]
        if any(c.returncode is None for c in children):
            log.warning(
                "worker %d exited with %s: stopping the others", first.pid, first.returncode
            )
            _forward(children, signal.SIGTERM)
        codes = [await c.wait() for c in children]
        return next((code for code in codes if code), 0)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _terminate_with_parent() -> None:
    # A supervisor killed with SIGKILL cannot pass anything on: the kernel sends the workers
    # SIGTERM instead (Linux PR_SET_PDEATHSIG), so none keeps the port.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _forward(children: list[asyncio.subprocess.Process], sig: signal.Signals) -> None:
    for child in children:
        if child.returncode is None:
            child.send_signal(sig)


def _serve_aggregated_metrics(directory: Path, port: int, host: str) -> None:
    # Imported here: the parent must not have touched prometheus_client's multiprocess state
    # before the directory exists, and the workers import it with the variable already set.
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    start_http_server(port, addr=host, registry=registry)
