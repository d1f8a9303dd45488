"""Server-Sent Events, written below the request middleware.

A stream lives for minutes or hours and mostly sends heartbeats: through the middleware every one
of them would pass ~10 `send` wrappers, and each stream would keep their frames alive. So the
route answers a stream with a response that starts it through the middleware (the status and
headers are the app's, security headers and CORS included; metrics count the request as
answered) and hands it to `Handoff`, the outermost layer, which writes the rest with the
server's own `send` once the request's handling has returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

_KEY = "agora.event_stream"

# Writes the body of a stream with the server's own send and receive, to its end.
Body = Callable[[Receive, Send], Awaitable[None]]


def event(position: str, kind: str, data: bytes) -> bytes:
    """One event: `id:`, `event:` and one line of `data:` (JSON has no raw newline)."""
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (position.encode(), kind.encode(), data)


def unnumbered(kind: str, data: bytes) -> bytes:
    """An event with no `id:` line: it leaves the client's last id as it was, so a resumed
    stream does not expect it again (presence: services/gateway/presence.py)."""
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), data)


def comment(text: str) -> bytes:
    return b": %s\n\n" % text.encode()


def opening(position: str | None, retry_ms: int) -> bytes:
    """A stream's first lines: the reconnection delay, and the position it starts after (an
    id-only event: a client cut before the first event resumes from it)."""
    text = b": live\nretry: %d\n" % retry_ms
    if position is not None:
        text += b"id: %s\n" % position.encode()
    return text + b"\n"


class EventStreamResponse(Response):
    """A 200 `text/event-stream` whose body `body` writes after the request's handling."""

    media_type = "text/event-stream"

    def __init__(self, body: Body) -> None:
        super().__init__(
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            media_type=self.media_type,
        )
        # No Content-Length: the body has no end the headers could name.
        del self.headers["content-length"]
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        holder: list[Body] | None = scope.get(_KEY)
        if holder is None:
            # Served without the Handoff layer (an app built otherwise): written from here.
            await self._body(receive, send)
            return
        holder.append(self._body)


class Handoff:
    """The outermost ASGI layer: writes the body of an event stream the app started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        holder: list[Any] = []
        scope[_KEY] = holder
        await self.app(scope, receive, send)
        if holder:
            await holder[0](receive, send)
