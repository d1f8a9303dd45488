"""A throwaway redis-server (Debian's, the one the local stack runs), started one way everywhere:
the Redis Cluster nodes of tools/redis_cluster.py, the backup's private server, the bench's single
Redis, the chaos stack's and the tests' own servers."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

import redis.asyncio as redis

from tools import ports
from tools.waiting import until

# The local stack's settings: noeviction, AOF with fsync always, no RDB snapshots.
STACK_CONF = Path(__file__).resolve().parents[1] / "deploy" / "local" / "redis.conf"

# Not answering yet: refused while it binds, LOADING while it reads its AOF or RDB.
_NOT_YET = (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError, OSError)


class _Process(Protocol):
    @property
    def returncode(self) -> int | None: ...


def argv(
    directory: Path | str, *options: str, port: int = 0, stack_conf: bool = False
) -> list[str]:
    """redis-server on loopback with its data in `directory` and no RDB snapshots; `stack_conf`
    reads the local stack's redis.conf first. `options` come last, so they win."""
    return [
        shutil.which("redis-server") or "redis-server",
        *([str(STACK_CONF)] if stack_conf else []),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        *options,
    ]


async def ready(
    client: redis.Redis, what: str, seconds: float = 10, process: _Process | None = None
) -> None:
    """Until a just-started server answers PING; a `process` that exited fails at once."""

    async def answers() -> bool:
        if process is not None and process.returncode is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        return bool(await client.ping())

    await until(f"{what} to answer PING", answers, seconds, every=0.05, ignoring=_NOT_YET)


async def gone(client: redis.Redis, what: str, seconds: float = 30) -> None:
    """Until a server told to stop no longer answers."""

    async def refused() -> bool:
        try:
            await client.ping()
        except redis.BusyLoadingError:
            return False
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return True
        return False

    await until(f"{what} to stop", refused, seconds, every=0.1)


@asynccontextmanager
async def running(*options: str, stack_conf: bool = False) -> AsyncIterator[str]:
    """A redis-server on a free port in a temporary directory for as long as the block runs; its
    URL. It is terminated (and its data gone) after."""
    port = ports.free_port()
    with tempfile.TemporaryDirectory(prefix="agora-redis-") as directory:
        with (Path(directory) / "redis.log").open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv(directory, *options, port=port, stack_conf=stack_conf),
                stdout=log,
                stderr=log,
            )
        client = redis.Redis(port=port)
        try:
            await ready(client, f"redis-server on {port}", process=proc)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            await client.aclose()
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 30)
