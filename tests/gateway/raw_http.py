"""A client over raw sockets, for what an HTTP client library would not send or would hide: a
request head written by hand, a body sent while the answer is read, and whether the server hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    fields = [f"{name}: {value}" for name, value in headers.items()]
    lines = [f"{method} {path} HTTP/1.1", "Host: gateway", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def _status(status_line: bytes) -> int:
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    return int(status_line.split()[1])


def _header(line: bytes, headers: dict[str, str]) -> None:
    name, _, value = line.decode().partition(":")
    headers[name.strip().lower()] = value.strip()


async def read_answer(reader: asyncio.StreamReader, started: float) -> Answer:
    status = _status(await reader.readline())
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        _header(line, headers)
    payload = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(status, headers, payload, time.monotonic() - started)


def read_answer_from(stream: BinaryIO, started: float) -> Answer:
    """read_answer from a blocking socket's file."""
    status = _status(stream.readline())
    headers: dict[str, str] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        _header(line, headers)
    payload = stream.read(int(headers.get("content-length", "0")))
    return Answer(status, headers, payload, time.monotonic() - started)


def body(total: int, *, chunked: bool) -> Iterator[bytes]:
    chunk = b"x" * 65_536
    for _ in range(0, total, len(chunk)):
        yield b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    if chunked:
        yield b"0\r\n\r\n"


def exchange(port: int, request: bytes, chunks: Iterator[bytes]) -> tuple[Answer, bool]:
    """Send `request` and then `chunks` from a thread of its own while reading the answer, as a
    client that watches for an early answer does; also whether the server then hung up.

    Blocking sockets: a server that answers early and closes makes the next send fail, and
    asyncio would then drop the answer still unread in the socket."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    started = time.monotonic()
    sock.sendall(request)

    def send() -> None:
        with contextlib.suppress(OSError):
            for chunk in chunks:
                sock.sendall(chunk)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        with sock.makefile("rb") as stream:
            answer = read_answer_from(stream, started)
            sock.settimeout(5)
            try:
                hung_up = stream.read() == b""
            except OSError:  # reset: hung up with our bytes unread
                hung_up = True
        return answer, hung_up
    finally:
        sock.close()
        sender.join(5)


async def closed_by_server(reader: asyncio.StreamReader, seconds: float = 5) -> bool:
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(reader.read(), seconds) == b""
    return True
