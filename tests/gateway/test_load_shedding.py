"""The gateway sheds load with 503 + Retry-After instead of queueing into timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from services.gateway.load_shedding import InFlightLimit

pytestmark = pytest.mark.asyncio


async def test_requests_past_the_bound_get_503_at_once_and_health_still_answers() -> None:
    release = asyncio.Event()

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = InFlightLimit(slow_app, limit=2)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        admitted = [asyncio.create_task(client.get("/api/x")) for _ in range(2)]
        await asyncio.sleep(0.05)
        shed = await asyncio.wait_for(client.get("/api/x"), 1)
        assert shed.status_code == 503
        assert shed.headers["retry-after"] == "1"
        assert shed.json()["error"]["code"] == "unavailable"
        health = asyncio.create_task(client.get("/healthz"))
        await asyncio.sleep(0.05)
        assert not health.done()  # admitted, not shed (the slow app holds it like the others)
        release.set()
        assert [r.status_code for r in await asyncio.gather(*admitted, health)] == [200, 200, 200]
    assert app.in_flight == 0
