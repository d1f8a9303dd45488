"""Reading a WatchInbox or WatchCourse call in a test: its next responses, within a deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc


async def take(stream: grpc.aio.UnaryStreamCall, n: int, within: float = 10) -> list[Any]:
    """The next `n` responses of the stream (grpc.aio's calls are untyped to mypy)."""
    got: list[Any] = []
    async with asyncio.timeout(within):
        while len(got) < n:
            got.append(await stream.read())
    return got


async def started(stream: grpc.aio.UnaryStreamCall) -> None:
    """Wait until the server has taken the watch's starting position (its initial metadata)."""
    await stream.initial_metadata()
    await asyncio.sleep(0.2)
