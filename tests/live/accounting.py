"""Accounting for the live feeds, as the chaos suite accounts for stored messages: every message
committed for an account must reach every stream watching that account at least once, in order
per conversation, however often each stream is cut and resumed from its last position.

Watchers are WatchInbox calls as the gateway makes them (with each user's token). Each one cuts
its stream at random points (after a random number of events or a random pause) and resumes with
the last position it received — or, in the negative control, without it (from now on), which
must show up as missing messages. The ledger is what the database stored at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc

from services.domain.live import POSITION_HEADER
from services.runtime.mysql import MysqlDatabase
from tools.jwt_token import mint

Stub = timeline_service_pb2_grpc.TimelineServiceStub


@dataclass
class Watcher:
    """One stream of one account, and everything it received, in order."""

    account: int
    resume_with_position: bool = True
    received: list[tuple[str, str]] = field(default_factory=list)  # (thread, msg_id)
    positions: list[str] = field(default_factory=list)
    resets: int = 0
    cuts: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last(self) -> str:
        return self.positions[-1] if self.positions else ""


@dataclass
class Outcome:
    streams: int
    cuts: int
    resets: int
    missing: int  # (stream, message) pairs never delivered
    out_of_order: int  # conversations whose first deliveries were not in stored order
    repeats: int  # deliveries of a message a stream had already had
    delivered: int
    errors: dict[str, int]


async def watch(
    stub_for: Callable[[], Stub],
    watcher: Watcher,
    secret: str,
    stop: asyncio.Event,
    rng: random.Random,
    cut_every: float,
) -> None:
    """Follow `watcher.account` until `stop`, cutting the stream about every `cut_every`
    seconds (a random pause) and resuming."""
    token = mint(secret, 7, [watcher.account], 3600)
    metadata = (("authorization", f"Bearer {token}"),)
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        after = watcher.last if watcher.resume_with_position else ""
        call = stub_for().WatchInbox(
            pb.WatchInboxRequest(account_id=watcher.account, after=after), metadata=metadata
        )
        # The cut: the client goes away at a random moment, whatever it is reading.
        cut = loop.call_later(rng.expovariate(1 / cut_every), call.cancel)
        ending = asyncio.create_task(stop.wait())
        ending.add_done_callback(functools.partial(_cancel, call))
        try:
            headers = dict(await call.initial_metadata() or ())
            if POSITION_HEADER in headers:  # else cut before the server answered
                if not watcher.positions:
                    watcher.positions.append(headers[POSITION_HEADER])  # where "now" was
                watcher.ready.set()
            async for response in call:
                watcher.positions.append(response.position)
                item = response.WhichOneof("item")
                if item == "message":
                    watcher.received.append((response.message.thread_id, response.message.msg_id))
                elif item == "reset":
                    watcher.resets += 1
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                watcher.errors[exc.code().name] += 1
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            if not call.cancelled():
                raise  # this task is cancelled, not the call
        finally:
            cut.cancel()
            ending.cancel()
            call.cancel()
        if not stop.is_set():
            watcher.cuts += 1


async def stored(db: MysqlDatabase) -> dict[int, dict[str, list[str]]]:
    """The ledger: account → conversation → msg_ids, as the database stored them, in order."""
    rows = await db.fetchall(
        "SELECT zalo_account_id, thread_id, msg_id FROM zalo_messages ORDER BY sent_at, id"
    )
    found: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for account, thread, msg_id in rows:
        found[int(account)][str(thread)].append(str(msg_id))
    return found


def _cancel(call: Any, _: object) -> None:
    call.cancel()


async def run(
    stub_for: Callable[[], Stub],
    secret: str,
    accounts: list[int],
    streams: int,
    send: Callable[[], Awaitable[None]],
    stored: Callable[[], Awaitable[dict[int, dict[str, list[str]]]]],
    *,
    cut_every: float,
    settle: Callable[[], Awaitable[None]],
    resume_with_position: bool = True,
    seed: int = 7,
    catch_up_seconds: float = 30,
) -> Outcome:
    """Open `streams` watchers over `accounts`, run `send` (the load) while they cut and resume,
    let `settle` deliver the rest, then compare with `stored()` (account → thread → msg_ids in
    stored order)."""
    rng = random.Random(seed)
    watchers = [Watcher(accounts[i % len(accounts)], resume_with_position) for i in range(streams)]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(
            watch(stub_for, w, secret, stop, random.Random(rng.random()), cut_every)
        )
        for w in watchers
    ]
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(w.ready.wait() for w in watchers))
        await send()
        await settle()
        # The last events come once the final batches commit: give every stream time to read.
        await _caught_up(watchers, stored, deadline=time.monotonic() + catch_up_seconds)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks)
    expected = await stored()
    return account_for(watchers, expected)


async def _caught_up(
    watchers: list[Watcher],
    stored: Callable[[], Awaitable[dict[int, dict[str, list[str]]]]],
    deadline: float,
) -> None:
    """Until every stream has every message stored so far — read again each time: the flusher
    may still be storing the last batches."""
    while time.monotonic() < deadline:
        expected = await stored()
        if all(_missing(w, expected) == 0 for w in watchers):
            return
        await asyncio.sleep(0.2)


def _missing(w: Watcher, expected: dict[int, dict[str, list[str]]]) -> int:
    got = {m for _, m in w.received}
    return sum(1 for ids in expected.get(w.account, {}).values() for m in ids if m not in got)


def account_for(watchers: list[Watcher], expected: dict[int, dict[str, list[str]]]) -> Outcome:
    missing = out_of_order = repeats = 0
    errors: dict[str, int] = defaultdict(int)
    for w in watchers:
        firsts: dict[str, list[str]] = defaultdict(list)
        seen: set[str] = set()
        for thread, msg_id in w.received:
            if msg_id in seen:
                repeats += 1
                continue
            seen.add(msg_id)
            firsts[thread].append(msg_id)
        missing += _missing(w, expected)
        for thread, ids in expected.get(w.account, {}).items():
            delivered = [m for m in firsts.get(thread, []) if m in set(ids)]
            if delivered != [m for m in ids if m in seen]:
                out_of_order += 1
        for code, n in w.errors.items():
            errors[code] += n
    return Outcome(
        streams=len(watchers),
        cuts=sum(w.cuts for w in watchers),
        resets=sum(w.resets for w in watchers),
        missing=missing,
        out_of_order=out_of_order,
        repeats=repeats,
        delivered=sum(len(w.received) for w in watchers),
        errors=dict(errors),
    )
