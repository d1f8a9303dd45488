"""Requests that announce a body the route will never read, against the real gateway app served by
uvicorn (h11) on a free port, over raw sockets: answered at once (not at the body deadline), and
the connection closed rather than drained; the routes that take a body keep their limits (401
before reading, 413, 408 at the deadline). No upstream is needed: none of these reaches one."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import uvicorn
from fastapi.routing import APIRoute
from starlette.types import Scope

from services.gateway.app import create_app
from services.gateway.request_body import takes_body
from services.gateway.routes import forum, messaging
from tests.gateway.raw_http import Answer, closed_by_server, head, read_answer
from tests.web.support import AUD, ISS, SECRET, settings
from tools.jwt_token import mint

pytestmark = pytest.mark.asyncio
BODY_TIMEOUT = 3.0
# At once: well before the body deadline, with room for a loaded machine.
AT_ONCE = 1.0


@pytest_asyncio.fixture(scope="module")
async def port() -> AsyncIterator[int]:
    app = create_app(settings(gateway_body_timeout_seconds=BODY_TIMEOUT, jwt_dev_mode=True))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(app, http="h11", log_config=None, access_log=False, lifespan="on")
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not serving.done(), serving
        await asyncio.sleep(0.01)
    yield int(sock.getsockname()[1])
    server.should_exit = True
    await asyncio.wait_for(serving, 10)
    sock.close()


def bearer() -> dict[str, str]:
    token = mint(SECRET, 7, [1], 600, kid="web", audience=AUD, issuer=ISS)
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


async def ask(
    port: int, method: str, path: str, headers: dict[str, str], sent: bytes = b""
) -> Answer:
    """Send a request head (and `sent` of its body, never the rest); the answer, and that the
    server then closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head(method, path, headers) + sent)
        answer = await asyncio.wait_for(read_answer(reader, time.monotonic()), BODY_TIMEOUT + 5)
        answer.headers["closed"] = str(await closed_by_server(reader))
        return answer
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/healthz", 405),  # a route that takes no body, asked with the wrong method
        ("GET", "/healthz", 200),  # the right method, but a body it does not read
        ("POST", "/nowhere", 404),
        ("PUT", "/web/index.html", 405),
        ("GET", "/openapi.json", 200),
        ("POST", "/dev", 404),
    ],
)
async def test_a_body_no_route_reads_is_not_waited_for(
    port: int, method: str, path: str, status: int
) -> None:
    started = time.monotonic()
    answer = await ask(port, method, path, {"Content-Length": "1000"})
    assert answer.status == status, answer.body
    assert time.monotonic() - started < AT_ONCE, (method, path)
    # Nobody reads the 1,000 bytes: the connection is not kept for them.
    assert answer.headers["closed"] == "True"


async def test_an_api_route_without_a_body_does_not_wait_for_one(port: int) -> None:
    # Authenticated, so it gets past the token; the route takes no body and answers (here 503:
    # no upstream) without waiting for the 1,000 bytes announced.
    started = time.monotonic()
    answer = await ask(
        port, "DELETE", "/api/courses/42/posts/1", {**bearer(), "Content-Length": "1000"}
    )
    assert answer.status != 408, answer.body
    assert time.monotonic() - started < BODY_TIMEOUT - 0.5


async def test_the_routes_that_take_a_body_keep_their_limits(port: int) -> None:
    posts = "/api/courses/42/posts"
    anonymous = await ask(port, "POST", posts, {"Content-Length": "1000"})
    assert anonymous.status == 401
    assert anonymous.seconds < AT_ONCE
    too_large = await ask(port, "POST", posts, {**bearer(), "Content-Length": str(20 * 2**20)})
    assert too_large.status == 413
    assert too_large.seconds < AT_ONCE
    slow = await ask(port, "POST", posts, {**bearer(), "Content-Length": "100"}, b'{"title":')
    assert slow.status == 408, slow.body
    assert BODY_TIMEOUT - 0.1 <= slow.seconds < BODY_TIMEOUT + 2
    assert slow.headers["closed"] == "True"
    token = await ask(port, "POST", "/dev/token", {"Content-Length": "100"}, b'{"sub":')
    assert token.status == 408, token.body


async def test_every_api_route_is_known_to_take_a_body_or_not() -> None:
    """BodyLimit finds the route the router will pick, through the routers the app includes:
    every API route, by each of its methods, reads a body exactly when it declares one."""
    app = create_app(settings(jwt_dev_mode=True))
    routes = [r for router in (messaging.router, forum.router) for r in router.routes]
    assert any(isinstance(r, APIRoute) and r.body_field is None for r in routes)
    for route in routes:
        assert isinstance(route, APIRoute)
        for method in route.methods or ():
            scope: Scope = {
                "type": "http",
                "method": method,
                "path": re.sub(r"\{[^}]+\}", "1", route.path),
                "root_path": "",
                "headers": [],
                "query_string": b"",
                "app": app,
            }
            assert takes_body(scope) is (route.body_field is not None), (method, route.path)
