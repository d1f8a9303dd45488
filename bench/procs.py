"""Service processes the bench starts: deploy/local/run-service.sh with the stack's settings for
that service, some of them overridden, next to the stack's on ports of their own, or in place of
the stack's flusher (stopped meanwhile) on its ports."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from bench.common import ROOT
from tools.ports import free_port
from tools.wait_healthy import wait


@dataclass(frozen=True)
class Proc:
    """Where a service process of the bench listens."""

    addr: str  # its API (GRPC_PORT), for the services that serve one
    health_port: int
    metrics_port: int


@asynccontextmanager
async def service_process(
    name: str, env: dict[str, str], *, drop: Iterable[str] = (), start_seconds: float = 30
) -> AsyncIterator[Proc]:
    """services.<name> started by the bench: the stack's settings for it (its env file) with
    `env` on top, and its own API, forum, health and metrics ports (the stack's process holds
    the configured ones). `drop`: variables of the bench's environment not to pass on (so that
    the env files or the service's defaults apply). Yields once its health port says SERVING;
    stopped (SIGTERM) on exit."""
    port, health_port, metrics_port = free_port(), free_port(), free_port()
    inherited = {k: v for k, v in os.environ.items() if k not in set(drop)}
    full = {
        **inherited,
        "GRPC_PORT": str(port),
        # ingest's forum listener; the other services ignore it.
        "GRPC_FORUM_PORT": str(free_port()),
        "GRPC_HEALTH_PORT": str(health_port),
        "METRICS_PORT": str(metrics_port),
        **env,
    }
    with tempfile.TemporaryFile() as log:
        proc = await asyncio.create_subprocess_exec(
            str(ROOT / "deploy/local/run-service.sh"),
            name,
            env=full,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
        )
        try:
            if await wait([f"grpc:127.0.0.1:{health_port}"], start_seconds):
                log.seek(0)
                tail = log.read().decode(errors="replace")[-1500:]
                raise SystemExit(f"the bench's {name} service did not start:\n{tail}")
            yield Proc(f"127.0.0.1:{port}", health_port, metrics_port)
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 30)


@asynccontextmanager
async def flusher_in_place(env: dict[str, str]) -> AsyncIterator[None]:
    """The flusher on the stack's own ports with `env` on top of the bench's environment, while
    the stack's flusher is stopped (a bench comparing its settings round by round). Yields once
    it is healthy; stopped (SIGTERM) on exit."""
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "deploy/local/run-service.sh"),
        "flusher",
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        if await wait([f"grpc:127.0.0.1:{os.environ['FLUSHER_PORT']}"], 30):
            raise SystemExit("bench flusher did not become healthy")
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
