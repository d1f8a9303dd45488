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

from services.gateway.errors import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_AT_CAPACITY = ApiError.unavailable("the gateway is at capacity; retry shortly", 1)


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
            await _AT_CAPACITY.response()(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
