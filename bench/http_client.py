"""A minimal HTTP/1.1 client on one keep-alive connection: GET and POST, the whole body read.

The same client measures the gateway and the HTTP echo, so what it costs is in both; written on
asyncio streams (no pool, no cookie jar, no URL object per request) so that it costs little.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class HttpError(Exception):
    pass


class KeepAliveClient:
    """`await client.get(path, headers)` → (status, body), one request at a time; the server
    must answer with a Content-Length or chunked body (both the gateway and the echo do)."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> KeepAliveClient:
        await self._connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self._host, self._port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._writer = self._reader = None

    async def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        return await self.request("GET", path, headers)

    async def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        fields = {**(headers or {}), "Content-Type": "application/json"}
        return await self.request("POST", path, fields, body)

    async def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        if self._writer is None:
            await self._connect()
        assert self._reader is not None
        assert self._writer is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method != "GET":
            lines.append(f"Content-Length: {len(body)}")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        fields = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                fields[name.strip().lower()] = value.strip()
        if "content-length" in fields:
            body = await self._reader.readexactly(int(fields["content-length"]))
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunked()
        else:
            raise HttpError(f"{method} {path}: no content-length and not chunked")
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return status, body

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")  # no trailers are expected
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)
