"""The trust boundary against the real gateway process, over raw sockets: a 20 MB anonymous upload
is refused at once and leaves the process's memory flat, lying Content-Lengths get 413 / 408 /
400, and hundreds of slowloris uploads hold no in-flight slot while a normal client is served."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tests.chaos.harness.stack import ChaosStack
from tests.gateway.raw_http import Answer, body, closed_by_server, exchange, head, read_answer
from tests.helpers import mint_token
from tests.stack import Env

pytestmark = pytest.mark.asyncio
MB = 1_000_000
# The live gateway's settings for this module: short enough to wait for, small enough to flood.
BODY_TIMEOUT = 4.0
MAX_IN_FLIGHT = 64
SLOW_CLIENTS = 300
MESSAGES = "/api/zalo-accounts/1/messages"
POSTS = "/api/courses/42/posts"


@pytest_asyncio.fixture(scope="module")
async def live() -> AsyncIterator[ChaosStack]:
    """Every service as its own process, behind the real gateway (uvicorn, h11)."""
    with pytest.MonkeyPatch.context() as env:
        # The stack copies this process's environment into each service when it starts it.
        env.setenv("GATEWAY_BODY_TIMEOUT_SECONDS", str(BODY_TIMEOUT))
        env.setenv("GATEWAY_MAX_IN_FLIGHT", str(MAX_IN_FLIGHT))
        stack = ChaosStack(full=True)
        await stack.start()
    yield stack
    await stack.stop()


def port(live: ChaosStack) -> int:
    return live.services["gateway"].port


def rss(live: ChaosStack) -> int:
    """The gateway process's resident memory, in bytes."""
    proc = live.services["gateway"].proc
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def upload(
    live: ChaosStack, path: str, headers: dict[str, str], total: int, *, chunked: bool = False
) -> Answer:
    """POST a `total`-byte body while reading the answer; the answer can come before the end."""
    framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(total)}
    request = head("POST", path, {**headers, **framing})
    answer, _ = await asyncio.to_thread(exchange, port(live), request, body(total, chunked=chunked))
    return answer


def bearer(env: Env) -> dict[str, str]:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


async def test_a_20mb_anonymous_upload_is_refused_at_once_and_leaves_memory_flat(
    live: ChaosStack, env: Env
) -> None:
    anonymous = {"Content-Type": "application/json"}
    await upload(live, MESSAGES, anonymous, 1000)  # warm: every code path loaded
    before = rss(live)
    for path in (MESSAGES, POSTS):
        for chunked in (False, True):
            for _ in range(3):
                answer = await upload(live, path, anonymous, 20 * MB, chunked=chunked)
                assert answer.status == 401, answer.body
                assert answer.seconds < 1, (path, chunked, answer.seconds)
                assert answer.headers["connection"] == "close"
    # Twelve 20 MB bodies were offered: none was read, so none is in memory.
    grown = rss(live) - before
    assert grown < 4 * 2**20, f"the gateway grew by {grown} bytes"
    # With a valid token, a declared size over the limit is refused just as fast.
    for path in (MESSAGES, POSTS):
        answer = await upload(live, path, bearer(env), 20 * MB)
        assert answer.status == 413, answer.body
        assert answer.seconds < 1, (path, answer.seconds)
    assert rss(live) - before < 4 * 2**20


async def test_a_chunked_body_with_a_valid_token_is_cut_off_at_the_limit(
    live: ChaosStack, env: Env
) -> None:
    post = await upload(live, POSTS, bearer(env), 20 * MB, chunked=True)
    assert post.status == 413, post.body
    assert b"payload_too_large" in post.body
    assert post.seconds < 1
    batch = await upload(live, MESSAGES, bearer(env), 20 * MB, chunked=True)
    assert batch.status == 413, batch.body
    assert b"16777216 bytes" in batch.body


async def test_lying_content_lengths(live: ChaosStack, env: Env, clean: None) -> None:
    # Declares 20 MB, sends nothing: refused before any of it is awaited.
    reader, writer = await asyncio.open_connection("127.0.0.1", port(live))
    writer.write(head("POST", POSTS, {**bearer(env), "Content-Length": str(20 * MB)}))
    answer = await asyncio.wait_for(read_answer(reader, time.monotonic()), 5)
    assert answer.status == 413
    assert await closed_by_server(reader)
    writer.close()
    # Declares 100 bytes, sends 10, then nothing: 408 once the body deadline passes, and the
    # connection is closed rather than kept waiting for the rest.
    reader, writer = await asyncio.open_connection("127.0.0.1", port(live))
    started = time.monotonic()
    writer.write(head("POST", POSTS, {**bearer(env), "Content-Length": "100"}) + b'{"title":')
    answer = await asyncio.wait_for(read_answer(reader, started), BODY_TIMEOUT + 5)
    assert answer.status == 408, answer.body
    assert BODY_TIMEOUT - 0.1 <= answer.seconds < BODY_TIMEOUT + 2
    assert await closed_by_server(reader)
    writer.close()
    # Declares 10 bytes, sends 1 MB: the 10 bytes are the body (not JSON: 400), and the rest is
    # no HTTP request at all, so the server hangs up instead of buffering it.
    before = rss(live)
    request = head("POST", f"{POSTS}/1/like", {**bearer(env), "Content-Length": "10"})
    answer, hung_up = await asyncio.to_thread(
        exchange, port(live), request, body(MB, chunked=False)
    )
    assert answer.status == 400, answer.body
    assert hung_up
    assert rss(live) - before < 4 * 2**20


async def test_unauthenticated_invalid_json_is_401(live: ChaosStack) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port(live)}") as client:
        response = await client.post(
            MESSAGES, content=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthenticated"


async def slow_upload(live: ChaosStack, headers: dict[str, str], stop: asyncio.Event) -> Answer:
    """A slowloris: announces 1,000 bytes and sends two a second, until answered or stopped."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port(live))
    try:
        writer.write(head("POST", POSTS, {**headers, "Content-Length": "1000"}))
        answered = asyncio.create_task(read_answer(reader, started))
        while not answered.done() and not stop.is_set():
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(b"  ")
                await writer.drain()
            await asyncio.wait([answered], timeout=1)
        return await asyncio.wait_for(answered, 5)
    finally:
        writer.close()


async def test_slowloris_uploads_hold_no_slot_and_a_normal_client_is_served(
    live: ChaosStack, env: Env, clean: None
) -> None:
    """300 uploads that trickle in, far more than the 64 requests allowed in flight: each holds
    only its connection while its body is read, so a normal client's requests are answered at
    once (not 503) all along, and every slow upload ends with 408 at the body deadline."""
    stop = asyncio.Event()
    anonymous = [
        asyncio.create_task(slow_upload(live, {"Content-Type": "application/json"}, stop))
        for _ in range(50)
    ]
    slow = [asyncio.create_task(slow_upload(live, bearer(env), stop)) for _ in range(SLOW_CLIENTS)]
    try:
        # Anonymous ones are answered from their headers, at once.
        for answer in await asyncio.wait_for(asyncio.gather(*anonymous), 10):
            assert answer.status == 401
            assert answer.seconds < 2
        await asyncio.sleep(0.5)  # every slow upload is connected and trickling
        assert not any(t.done() for t in slow)
        timings = []
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port(live)}", headers=bearer(env)
        ) as client:
            created = await client.post(POSTS, json={"title": "still here", "body": "b"})
            assert created.status_code == 201, created.text
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                started = time.monotonic()
                response = await client.get(POSTS)
                timings.append(time.monotonic() - started)
                assert response.status_code == 200, response.text
        assert not any(t.done() for t in slow), "the slow uploads were still being read"
        assert len(timings) >= 10
        assert max(timings) < 0.5, timings
        answers = await asyncio.wait_for(asyncio.gather(*slow), BODY_TIMEOUT + 10)
    finally:
        stop.set()
        for task in slow:
            task.cancel()
    assert sorted({a.status for a in answers}) == [408]
    assert all(a.seconds < BODY_TIMEOUT + 3 for a in answers)
