"""A TCP proxy in front of PostgreSQL (or PgBouncer) that counts round trips, for one process.

pg_stat_database counts every session of the database (the flusher, the other services, anyone
else using the stack), and pg_stat_statements is not loaded; a service process pointed at this
proxy instead has exactly its own traffic counted. A round trip is a client message the client
then waits on: Sync (the end of an extended-protocol exchange), Flush (with its statement cache
off, as behind PgBouncer, asyncpg sends Parse + Describe + Flush, then Bind + Execute + Sync: two
round trips per statement) or Query (simple protocol). The connection must not be TLS (PgBouncer
here answers 'N' to SSLRequest), or the messages could not be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_ROUND_TRIP_TYPES = (b"S", b"Q", b"H")


class CountingProxy:
    """Listens on 127.0.0.1:`port` (after `start`), forwards to `upstream`, counts round trips."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self.round_trips = 0
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(
                self._client_to_server(client_r, server_w), _pipe(server_r, client_w)
            )
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a side closed (or the loop is ending): the other side is closed below
        finally:
            for w in (client_w, server_w):
                w.close()

    async def _client_to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # Start-up: untyped messages (length, code); SSL/GSS requests come before the startup
        # message, each answered by one byte that _pipe forwards.
        while True:
            head = await reader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            writer.write(head + await reader.readexactly(length - 8))
            await writer.drain()
            if code not in (_SSL_REQUEST, _GSSENC_REQUEST):
                break
        while True:
            head = await reader.readexactly(5)
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            writer.write(head + await reader.readexactly(length - 4))
            if kind in _ROUND_TRIP_TYPES:
                self.round_trips += 1
                await writer.drain()
            if kind == b"X":  # Terminate
                await writer.drain()
                return


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


@contextlib.asynccontextmanager
async def counting_proxy(host: str, port: int) -> AsyncIterator[CountingProxy]:
    proxy = CountingProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
