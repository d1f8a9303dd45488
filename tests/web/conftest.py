"""The browser tests' fixtures: every service as a process behind the real gateway (as `make up`
runs them), and Debian's Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser

from tests.chaos.harness.faults.grants import ensure_grants
from tests.chaos.harness.stack import ChaosStack
from tests.web.support import chromium


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "stack_env(**settings): extra environment for the services of `stack`"
    )


@pytest_asyncio.fixture
async def stack(request: pytest.FixtureRequest, clean: None) -> AsyncIterator[str]:
    """Ingest, timeline, likes, a flusher and the gateway as processes on free ports (their own
    Redis; the suite's databases, just reset by `clean`); yields the gateway's URL. A test marked
    `@pytest.mark.stack_env(NAME="value")` runs them with those settings too."""
    await ensure_grants()  # an interrupted chaos run may have left the flusher's revoked
    marker = request.node.get_closest_marker("stack_env")
    running = ChaosStack(full=True)
    with pytest.MonkeyPatch.context() as env:
        # The local stack's development settings (JWT_DEV_MODE=true and its audience and
        # issuer come from stack.env), listening on loopback only.
        env.setenv("JWT_DEV_MODE", "true")
        env.setenv("GATEWAY_HOST", "127.0.0.1")
        for name, value in (marker.kwargs if marker else {}).items():
            env.setenv(name, value)
        try:
            await running.start()
        except BaseException:
            await running.stop()
            raise
    try:
        yield f"http://127.0.0.1:{running.services['gateway'].port}"
    finally:
        await running.stop()


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched
