"""Read each request body whole, within a size limit and a deadline, before the app sees it.

The body is read here, outside InFlightLimit: a client that uploads slowly (or never finishes)
holds a connection and this coroutine, never one of the in-flight slots meant for requests the
gateway is working on. The app then gets the body replayed from memory, at once.

Only a body some route will read is waited for: a request for a route that takes none (health,
the documentation, static files, a GET or DELETE) or for no route at all (404, 405) goes on at
once, unread, and its connection is closed after the answer instead of kept for those bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway.errors import ApiError, close_after, has_body


class _TooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: a body over its route's limit is 413 (a Content-Length over it before
    anything is read, a chunked body as soon as it passes it); a body that has not fully arrived
    within `timeout` seconds is 408. Both close the connection."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        timeout: float,
        route_limits: Sequence[tuple[BaseRoute, int]] = (),
    ) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout
        # Routes (matched as the router matches them: path and method) with a limit of their own.
        self.route_limits = list(route_limits)

    def limit_for(self, scope: Scope) -> int:
        for route, limit in self.route_limits:
            if route.matches(scope)[0] is Match.FULL:
                return limit
        return self.limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not has_body(headers):
            await self.app(scope, receive, send)
            return
        if not takes_body(scope):
            await self.app(scope, receive, _closing(send))
            return
        limit = self.limit_for(scope)
        error: ApiError | None = None
        body: bytes | None = None
        try:
            declared = headers.get("content-length")
            if declared is not None and "transfer-encoding" not in headers:
                if not declared.isdigit():
                    raise ApiError(400, "bad_request", "malformed Content-Length")
                if int(declared) > limit:
                    raise ApiError.too_large(limit)
            async with asyncio.timeout(self.timeout):
                body = await _read(receive, limit)
        except ApiError as exc:
            error = exc
        except _TooLarge:
            error = ApiError.too_large(limit)
        except TimeoutError:
            error = ApiError.body_timeout(self.timeout)
        if error is not None:
            await close_after(error.response(), headers)(scope, receive, send)
            return
        if body is None:
            return  # the client went away mid-upload: nobody to answer
        await self.app(scope, _replay(body, receive), send)


def takes_body(scope: Scope) -> bool:
    """Whether the route the app's router will pick for this request reads a body: an API route
    that declares one. No route at all (the router answers 404 or 405 without reading), static
    files and GET or HEAD routes read none; any other kind of route counts as reading one, so its
    body is held to the limits."""
    route = _route(getattr(getattr(scope.get("app"), "router", None), "routes", ()), scope)
    if route is None:
        return False
    if isinstance(route, APIRoute):
        return route.body_field is not None
    if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
        return False
    return scope["method"] not in ("GET", "HEAD")


def _route(routes: Iterable[BaseRoute], scope: Scope) -> BaseRoute | None:
    """The first route matching path and method, as the router picks it; inside a router the app
    includes (FastAPI keeps it whole, matching its routes in order), the route of that router."""
    for route in routes:
        if route.matches(scope)[0] is Match.FULL:
            included = getattr(route, "original_router", None)
            return route if included is None else _route(included.routes, scope)
    return None


def _closing(send: Send) -> Send:
    """`send`, asking the server to close the connection after the answer: the request's body is
    left unread, and the server would otherwise read (and discard) it to reuse the connection."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None when the client disconnected; _TooLarge past `limit`."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            raise _TooLarge
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands over `body` first, then whatever the server sends (a disconnect)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
