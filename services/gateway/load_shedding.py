"""Shed load instead of timing out: past a bound on requests in flight, answer 503 at once.

A gateway that queues without limit turns an overloaded upstream into timeouts for everyone; a
fast 503 with Retry-After lets clients back off while the requests already admitted finish.
A request reaches this only once its body has been read (request_body.BodyLimit, outside it), so
the slots count work the gateway is doing, never a client that uploads slowly.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_BODY = orjson.dumps(
    {
        "success": False,
        "error": {"code": "unavailable", "message": "the gateway is at capacity; retry shortly"},
    }
)


class InFlightLimit:
    """ASGI middleware: at most `limit` HTTP requests in flight; /healthz is never shed, nor a
    long-lived stream (paths matching `exempt`), which would hold a slot for hours."""

    def __init__(self, app: ASGIApp, limit: int, exempt: re.Pattern[str] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0
        self._exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path == "/healthz"
            or (self._exempt is not None and self._exempt.fullmatch(path))
        ):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"retry-after", b"1"),
                        (b"content-length", str(len(_BODY)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _BODY})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
