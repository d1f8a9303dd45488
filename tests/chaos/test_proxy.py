"""The chaos proxy against a tiny local echo server (no datastores): it relays in forward mode,
goes silent without closing anything in blackhole mode, and serves new connections once healed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from tests.chaos.harness.proxy import Proxy, ProxyProcess

pytestmark = pytest.mark.asyncio

SILENCE = 0.3  # long enough for a local echo to come back many times over


@dataclass
class Echo:
    """Echoes every byte back; counts the connections it saw end."""

    port: int = 0
    closed: int = 0
    server: asyncio.Server | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        self.closed += 1
        self.ended.set()
        writer.close()


@pytest_asyncio.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    await server.start()
    yield server
    assert server.server is not None
    server.server.close()


@pytest_asyncio.fixture
async def proxy(echo: Echo) -> AsyncIterator[Proxy]:
    p = Proxy("127.0.0.1", echo.port)
    await p.start()
    yield p
    await p.close()


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int) -> Connection:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)


@pytest_asyncio.fixture
async def old(proxy: Proxy) -> Connection:
    """A connection through the proxy that carried traffic before the fault."""
    connection = await connect(proxy.port)
    assert await echoes(*connection, b"before")
    return connection


async def echoes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, text: bytes) -> bool:
    """True when `text` comes back; False on silence. A closed connection fails the test."""
    writer.write(text)
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.readexactly(len(text)), SILENCE)
    except TimeoutError:
        assert not reader.at_eof(), "the connection was closed instead of going silent"
        return False
    assert data == text
    return True


async def test_forward_relays_both_ways(proxy: Proxy) -> None:
    reader, writer = await connect(proxy.port)
    assert await echoes(reader, writer, b"ping")
    assert await echoes(reader, writer, b"x" * 200_000)
    writer.close()


async def test_blackhole_silences_open_and_new_connections_without_closing(
    proxy: Proxy, echo: Echo, old: Connection
) -> None:
    proxy.blackhole()
    assert not await echoes(*old, b"during")
    # A new connection is accepted, then nothing: no reply, no close, no upstream connection.
    new = await connect(proxy.port)
    assert not await echoes(*new, b"hello?")
    assert not await echoes(*old, b"still there?")
    assert echo.closed == 0
    assert proxy.stats.blackholed == 2
    assert proxy.stats.dropped_bytes >= len(b"during" + b"hello?" + b"still there?")

    proxy.forward()
    fresh = await connect(proxy.port)
    assert await echoes(*fresh, b"healed")
    # A blackholed connection stays dead: the bytes it lost cannot be replayed.
    assert not await echoes(*old, b"old one?")
    assert not await echoes(*new, b"new one?")
    for _, writer in (old, new, fresh):
        writer.close()


async def test_a_close_crosses_only_once_the_partition_healed(proxy: Proxy, echo: Echo) -> None:
    reader, writer = await connect(proxy.port)
    assert await echoes(reader, writer, b"hi")
    proxy.blackhole()
    writer.close()  # the client gives up (its deadline) while the network is down
    await asyncio.sleep(SILENCE)
    assert echo.closed == 0, "the server learned of the close through a partition"
    proxy.forward()
    await asyncio.wait_for(echo.ended.wait(), 2)
    assert echo.closed == 1


async def test_refuse_resets_open_and_new_connections_until_forward(
    proxy: Proxy, echo: Echo, old: Connection
) -> None:
    proxy.refuse()
    for reader, writer in (old, await connect(proxy.port)):
        writer.write(b"anyone?")
        with contextlib.suppress(ConnectionResetError):  # closed or reset: either says "no"
            assert await asyncio.wait_for(reader.read(10), 2) == b""
        writer.close()
    await asyncio.wait_for(echo.ended.wait(), 2)  # the server side was reset too
    proxy.forward()
    fresh = await connect(proxy.port)
    assert await echoes(*fresh, b"back")
    fresh[1].close()


async def test_a_target_that_is_down_refuses_connections() -> None:
    echo = Echo()
    await echo.start()
    assert echo.server is not None
    echo.server.close()
    await echo.server.wait_closed()
    p = Proxy("127.0.0.1", echo.port)
    await p.start()
    try:
        reader, writer = await connect(p.port)
        writer.write(b"anyone?")
        with contextlib.suppress(ConnectionResetError):  # closed or reset: either says "no"
            assert await asyncio.wait_for(reader.read(10), 2) == b""
    finally:
        await p.close()


async def test_the_proxy_process_switches_on_command(echo: Echo) -> None:
    proxy = ProxyProcess("echo", "127.0.0.1", echo.port)
    port = await proxy.start()
    try:
        old = await connect(port)
        assert await echoes(*old, b"one")
        reply = await proxy.blackhole()
        assert reply["mode"] == "blackhole"
        assert reply["blackholed"] == 1
        assert not await echoes(*old, b"two")
        new = await connect(port)
        assert not await echoes(*new, b"three")
        reply = await proxy.forward()
        assert reply["mode"] == "forward"
        fresh = await connect(port)
        assert await echoes(*fresh, b"four")
        stats = await proxy.stats()
        assert stats["accepted"] == 3
        assert stats["blackholed"] == 2
        assert echo.closed == 0
        for _, writer in (old, new, fresh):
            writer.close()
    finally:
        await proxy.stop()
