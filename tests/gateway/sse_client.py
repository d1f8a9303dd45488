"""An SSE client of the gateway for the live tests: the gateway app under uvicorn (a stream needs a
real server: an in-memory transport would wait for the end of a response that never ends), and
its event streams read event by event. The fixtures are taken by the modules that use them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
import uvicorn

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.gateway.server import GatewayServer
from services.runtime.grpc_server import GrpcServer
from tests.stack import Env, gateway_settings

STREAMS_PER_USER = 3


@pytest_asyncio.fixture(scope="module")
async def base_url(
    env: Env, ingest_server: GrpcServer, timeline_server: GrpcServer, likes_server: GrpcServer
) -> AsyncIterator[str]:
    settings = gateway_settings(
        env,
        ingest_server,
        timeline_server,
        likes_server,
        live_streams_per_user=STREAMS_PER_USER,
        live_heartbeat_seconds=1,
        # Fewer short requests in flight than the streams a test holds: streams take no slot.
        gateway_max_in_flight=2,
    )
    async with serve(settings) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def serve(settings: GatewaySettings) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """The gateway app under uvicorn on a free port, as its process runs it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = GatewayServer(
        uvicorn.Config(create_app(settings), log_config=None, access_log=False, lifespan="on")
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not serving.done(), serving
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 15)
        sock.close()


@pytest.fixture
def gateway(
    env: Env, ingest_server: GrpcServer, timeline_server: GrpcServer, likes_server: GrpcServer
) -> Callable[..., contextlib.AbstractAsyncContextManager[tuple[str, uvicorn.Server]]]:
    """A gateway of the test's own under uvicorn: these settings over the tests' defaults."""

    def start(**overrides: Any) -> contextlib.AbstractAsyncContextManager[tuple[str, Any]]:
        return serve(
            gateway_settings(env, ingest_server, timeline_server, likes_server, **overrides)
        )

    return start


Gateway = Callable[..., contextlib.AbstractAsyncContextManager[tuple[str, uvicorn.Server]]]


@dataclass
class Event:
    id: str | None
    event: str | None
    data: Any


class EventStream:
    """One open SSE response, read event by event (comments are kept apart). A task of its own
    reads the lines, so a read that times out leaves the stream readable."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.comments: list[str] = []
        self.retry: int | None = None
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._last_line = ""
        self.received = 0  # events read off the wire so far
        self.lines: list[str] = []
        self._opened = asyncio.Event()
        # A refusal's JSON body is the test's to read.
        streaming = response.status_code == 200
        self._reader = asyncio.create_task(self._read() if streaming else asyncio.sleep(0))

    async def _read(self) -> None:
        fields: dict[str, str] = {}
        try:
            async for line in self.response.aiter_lines():
                self.lines.append(line)
                if line:
                    self._last_line = line
                else:
                    self._opened.set()
                if not line:
                    if "data" in fields:
                        self.received += 1
                        data = orjson.loads(fields["data"])
                        self._events.put_nowait(Event(fields.get("id"), fields.get("event"), data))
                    fields = {}
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "":
                    self.comments.append(value)
                elif name == "retry":
                    self.retry = int(value)
                else:
                    fields[name] = value
        except httpx.HTTPError:
            pass
        finally:
            self._events.put_nowait(None)

    async def opening(self, within: float = 5) -> list[str]:
        """The stream's first lines, up to the blank line that ends its first event."""
        async with asyncio.timeout(within):
            await self._opened.wait()
        return self.lines[: self.lines.index("")]

    async def ending(self, within: float = 10) -> str:
        """The stream's last line, once it has ended (its `: ended: <why>` comment)."""
        async with asyncio.timeout(within):
            await asyncio.shield(self._reader)
        return self._last_line

    async def next(self, within: float = 10) -> Event:
        async with asyncio.timeout(within):
            event = await self._events.get()
        if event is None:
            self._events.put_nowait(None)  # ended: every later read says so too
            raise AssertionError("the stream ended")
        return event

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def events(
    base_url: str, path: str, token: str | None, last_event_id: str | None = None
) -> AsyncIterator[EventStream]:
    headers: dict[bytes, bytes] = {b"Accept": b"text/event-stream"}
    if token is not None:
        headers[b"Authorization"] = f"Bearer {token}".encode()
    if last_event_id is not None:
        # httpx sends str headers as ASCII; a header may carry any byte but controls (latin-1).
        headers[b"Last-Event-ID"] = last_event_id.encode("latin-1")
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        client.stream("GET", path, headers=headers) as response,
    ):
        stream = EventStream(response)
        try:
            yield stream
        finally:
            await stream.close()
