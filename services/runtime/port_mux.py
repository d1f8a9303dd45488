"""One TCP port for gRPC and plain-HTTP status pages (the flusher's health + metrics port).

A connection that opens with the HTTP/2 preface ("PRI * HTTP/2.0…") is gRPC: its bytes are piped
to the real grpc.aio server listening on loopback. Anything else is read as one HTTP/1.1 GET and
answered from `routes` (e.g. /metrics for Prometheus), then closed. Only status pages are served
this way; request traffic never goes through here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

Route = Callable[[], tuple[str, bytes]]  # → (content type, body)
_MAX_HEADER_BYTES = 8192


class PortMux:
    """Listens on `port`; forwards gRPC to `grpc_port` on loopback, answers HTTP GETs itself."""

    def __init__(
        self, *, host: str, port: int, grpc_port: int, routes: Mapping[str, Route]
    ) -> None:
        self._host = host
        self._port = port
        self._grpc_port = grpc_port
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None
        self.port = port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.read(3)
            while head and len(head) < 3:
                more = await reader.read(3 - len(head))
                if not more:
                    break
                head += more
            if head == b"PRI":
                await self._proxy(head, reader, writer)
            elif head:
                await self._http(head, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _proxy(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._grpc_port)
        up_writer.write(head)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(ConnectionError, OSError):
                dst.write_eof()

        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            up_writer.close()

    async def _http(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        request = head + await reader.readuntil(b"\r\n\r\n")
        if len(request) > _MAX_HEADER_BYTES:
            return
        parts = request.split(b"\r\n", 1)[0].split()
        method, path = (
            (parts[0], parts[1].split(b"?", 1)[0].decode()) if len(parts) >= 2 else (b"", "")
        )
        route = self._routes.get(path)
        if method not in (b"GET", b"HEAD"):
            status, content_type, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
        elif route is None:
            status, content_type, body = "404 Not Found", "text/plain", b"not found\n"
        else:
            status = "200 OK"
            content_type, body = route()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        if method != b"HEAD":
            writer.write(body)
        await writer.drain()
