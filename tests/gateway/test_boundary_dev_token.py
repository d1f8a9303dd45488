"""The development sign-in (/dev/token) against DNS rebinding: a page elsewhere that makes its own
host name resolve to 127.0.0.1 reaches the gateway from a loopback address, but its requests
still name that host; only requests addressed to this machine by a loopback name get a token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from services.gateway.app import create_app
from tests.web.support import settings

pytestmark = pytest.mark.asyncio

PORT = 8080
LOCAL_HOSTS = [
    f"localhost:{PORT}",
    f"127.0.0.1:{PORT}",
    f"[::1]:{PORT}",
    "localhost",
    "127.0.0.1",
    "[::1]",
    f"LOCALHOST:{PORT}",
]
FOREIGN_HOSTS = [
    "evil.example",
    f"evil.example:{PORT}",
    f"localhost.evil.example:{PORT}",
    f"127.0.0.1.nip.io:{PORT}",
    f"evil@localhost:{PORT}",
    f"localhost:{PORT}@evil.example",
    f"[::1].evil.example:{PORT}",
    f"localhost:{PORT}:{PORT}",
    "localhost:port",
]


@asynccontextmanager
async def loopback_client(peer: str = "127.0.0.1") -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(jwt_dev_mode=True))
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))
    async with httpx.AsyncClient(transport=transport, base_url=f"http://localhost:{PORT}") as c:
        yield c


async def sign_in(c: httpx.AsyncClient, host: str) -> list[httpx.Response]:
    headers = {"Host": host}
    return [
        await c.get("/dev/token", headers=headers),
        await c.post("/dev/token", json={"sub": 7, "accounts": [1]}, headers=headers),
    ]


async def test_a_loopback_caller_naming_another_host_gets_no_token() -> None:
    async with loopback_client() as c:
        for host in FOREIGN_HOSTS:
            for response in await sign_in(c, host):
                assert response.status_code == 403, (host, response.text)
                assert response.json()["error"]["code"] == "permission_denied", host
                assert "token" not in response.json().get("data", {}), host


async def test_a_loopback_caller_naming_a_loopback_host_signs_in() -> None:
    async with loopback_client() as c:
        for host in LOCAL_HOSTS:
            listed, minted = await sign_in(c, host)
            assert listed.status_code == 200, (host, listed.text)
            assert minted.status_code == 201, (host, minted.text)
            assert minted.json()["data"]["token"], host


async def test_a_caller_from_the_network_gets_no_token_whatever_host_it_names() -> None:
    async with loopback_client(peer="10.1.2.3") as c:
        for host in LOCAL_HOSTS[:3]:
            for response in await sign_in(c, host):
                assert response.status_code == 403, (host, response.text)
