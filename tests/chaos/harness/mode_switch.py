"""LIKES_MODE switched under load, the way a rolling deploy does it: pods of two modes serve the
same users at once, and each pod is restarted with the other mode mid-run (docs/likes.md,
"Switching modes").

The stack's likes process ("likes", buffered) keeps serving the harness's load. A second likes
process ("likes-b") starts beside it; users of their own toggle through both, each user's
consecutive toggles on alternate pods, so a like a buffered pod acknowledged is often still in the
stream when the same user's unlike reaches a direct pod, and a direct pod's write lands under a
buffered pod's warm SET. Phases:

1. likes buffered, likes-b sync;
2. likes-b restarted as counterless;
3. likes restarted as sync (the harness's load switches too: two direct modes, with the buffered
   toggles of the first run still in the stream);
4. likes restarted as buffered again.

The toggles go into the harness's ledger, so its accounting — every (user, post) pair's final
state in PostgreSQL and in the user's Redis SET against the last acknowledged toggle — covers
them; at the end the SET of every user who toggled is warmed through the buffered pod
(LikedMap), so each one is checked. The flusher recounts every second (the counterless rows'
counters).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable

import asyncpg
import grpc
from agora.forum.v1 import like_service_pb2, like_service_pb2_grpc

from tests.chaos.harness.load import (
    CHAOS_COURSE,
    RPC_TIMEOUT,
    Ledger,
    Load,
    enrol,
    until_acked,
)
from tests.chaos.harness.service import Service
from tests.chaos.harness.stack import ChaosStack
from tools import callers
from tools.ports import free_port

# Users of this scenario only (the harness's load has 60,000–61,999), enrolled here.
USERS = list(range(62_000, 62_400))
SENDERS = 16
PAUSE_S = 0.02
PHASE_S = 3.0
# The flusher's recount of dirty counters: the counterless pods' rows are counted by it.
FLUSHER_ENV = {"RECONCILE_INTERVAL_SECONDS": "1"}
Stub = like_service_pb2_grpc.LikeServiceStub


def _pg_admin() -> str:
    e = os.environ
    return (
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
        "/agora_test"
    )


def _mode(mode: str) -> dict[str, str]:
    """The environment a likes process of `mode` needs on top of the stack's."""
    if mode == "buffered":
        return {"LIKES_MODE": mode}
    e = os.environ
    writer = (
        f"postgresql://agora_likes_writer:{e['PG_LIKES_WRITER_PASSWORD']}@127.0.0.1:{e['PG_PORT']}"
        "/agora_test"
    )
    return {"LIKES_MODE": mode, "POSTGRES_WRITE_URL": writer}


async def _prepare() -> list[int]:
    """Enrol this scenario's users; the run's posts (the three prepare() just made)."""
    conn = await asyncpg.connect(_pg_admin())
    try:
        await enrol(conn, USERS)
        rows = await conn.fetch(
            "SELECT id FROM posts WHERE course_id = $1 ORDER BY id DESC LIMIT 3", CHAOS_COURSE
        )
        return sorted(r[0] for r in rows)
    finally:
        await conn.close()


class Senders:
    """Like senders over two pods: each owns a slice of USERS, one user at a time, and sends each
    toggle of a user to the other pod than the previous one (a retry goes to the other pod too, as
    a balanced client's would). Every toggle is acknowledged before the user's next one, and
    recorded in the harness's ledger as its own load records them."""

    def __init__(self, ledger: Ledger, stubs: tuple[Stub, Stub], posts: list[int]) -> None:
        self._ledger = ledger
        self._stubs = stubs
        self._posts = posts
        self.acked_by: list[int] = [0, 0]

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._sender(USERS[k::SENDERS], stop) for k in range(SENDERS)))

    async def _sender(self, users: list[int], stop: asyncio.Event) -> None:
        while not stop.is_set():
            for user in users:
                op = 0
                for round_ in range(2 + user % 3):
                    for post in self._posts:
                        if stop.is_set():
                            return
                        await self._toggle(user, post, round_ % 2 == 0, op, stop)
                        op += 1
                        await asyncio.sleep(PAUSE_S)

    async def _toggle(self, user: int, post: int, like: bool, op: int, stop: asyncio.Event) -> None:
        request, history = self._ledger.like_sending(user, post, like)

        async def set_like(attempt: int) -> int:
            """The pod that acknowledged: each attempt on the other pod than the last."""
            pod = (op + attempt) % 2
            await self._stubs[pod].SetLike(request, timeout=RPC_TIMEOUT)
            return pod

        pod = await until_acked(set_like, stop, self._ledger.refused)
        if pod is None:
            return
        now = time.monotonic()
        self._ledger.like_ack_times.append(now)
        self._ledger.like_acked(history, like, now)
        self.acked_by[pod] += 1


async def _restart(stack: ChaosStack, service: Service, mode: str) -> float:
    """SIGTERM (it drains), then start it again in `mode` on the same ports; seconds it took."""
    started = time.monotonic()
    await service.stop()
    await service.start(**_mode(mode))
    await service.healthy()
    stack.note(f"{service.name} restarted as {mode}")
    return time.monotonic() - started


async def _order_waits(stack: ChaosStack) -> dict[str, float]:
    """agora_like_order_waits_total of the likes processes now, by side and outcome."""
    return {
        f"{side}_{outcome}": await stack.metric(
            "agora_like_order_waits_total", prefix="likes", side=side, outcome=outcome
        )
        for side in ("direct", "buffered")
        for outcome in ("done", "gave_up")
    }


async def switch_modes(stack: ChaosStack, load: Load) -> dict[str, float]:
    posts = await _prepare()
    a = stack.services["likes"]
    b = Service("likes-b", "likes", free_port(), dict(a.env), stack.log_dir)
    stack.services[b.name] = b
    await b.start(**_mode("sync"))
    await b.healthy()
    stack.note("likes-b started as sync beside likes (buffered)")
    secret = os.environ["TEST_JWT_SECRET"]
    waits: dict[str, float] = dict.fromkeys(await _order_waits(stack), 0.0)
    restarts = 0.0

    async def phase(step: Callable[[], Awaitable[float]] | None) -> None:
        nonlocal restarts
        await asyncio.sleep(PHASE_S)
        for key, value in (await _order_waits(stack)).items():
            waits[key] += value  # a restart starts its counters again
        if step is not None:
            restarts += await step()

    stop = asyncio.Event()
    async with (
        callers.connect(f"127.0.0.1:{a.port}", "gateway", secret=secret) as to_a,
        callers.connect(f"127.0.0.1:{b.port}", "gateway", secret=secret) as to_b,
    ):
        senders = Senders(load.ledger, (Stub(to_a), Stub(to_b)), posts)
        running = asyncio.create_task(senders.run(stop))
        try:
            await phase(lambda: _restart(stack, b, "counterless"))
            await phase(lambda: _restart(stack, a, "sync"))
            await phase(lambda: _restart(stack, a, "buffered"))
            await phase(None)
        finally:
            stop.set()
            await running
        stack.note("mode-switch senders stopped")
        # Every SET of a user who toggled warmed now (from PostgreSQL and the unflushed toggles),
        # the harness's users' too (direct writes dropped theirs), so the accounting checks each
        # one against the last acknowledged toggle.
        warm = Stub(to_a)
        for user in sorted({user for user, _post in load.ledger.likes}):
            with contextlib.suppress(grpc.aio.AioRpcError):
                await warm.LikedMap(
                    like_service_pb2.LikedMapRequest(user_id=user, course_id=CHAOS_COURSE),
                    timeout=RPC_TIMEOUT,
                )
    await b.stop()
    return {
        "toggles_on_likes": senders.acked_by[0],
        "toggles_on_likes_b": senders.acked_by[1],
        "restarts_s": restarts,
        **{f"waits_{k}": v for k, v in waits.items()},
    }
