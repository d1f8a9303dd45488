"""Steady load of uniquely identified messages and like/unlike sequences, sent the way a real
client does: a batch or a toggle is retried until it is acknowledged; every attempt and ack is in
the ledger. Optionally forum writes too (comments, each sent once: a comment has no key that would
make a retry safe, so one whose answer was lost may be stored or not, but an acknowledged one must
be stored, once)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import asyncpg
import grpc
from agora.forum.v1 import (
    forum_write_service_pb2,
    forum_write_service_pb2_grpc,
    like_service_pb2,
    like_service_pb2_grpc,
)
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc, message_pb2
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from tools import callers

T = TypeVar("T")

CHAOS_ACCOUNT = 777
CHAOS_COURSE = 4242


async def enrol(conn: asyncpg.Connection, users: Sequence[int]) -> None:
    """`users` in the chaos course (those already in stay as they are)."""
    await conn.execute(
        "INSERT INTO course_members (course_id, user_id)"
        " SELECT $1, u FROM unnest($2::bigint[]) u ON CONFLICT DO NOTHING",
        CHAOS_COURSE,
        list(users),
    )


BATCH = 20
CONVERSATIONS_PER_SENDER = 5
RPC_TIMEOUT = 3.0


async def until_acked(
    call: Callable[[int], Awaitable[T]],
    stop: asyncio.Event,
    refused: Callable[[grpc.aio.AioRpcError], None],
) -> T | None:
    """What `call(attempt)` answers once acknowledged, its attempts counted from 0; None when
    `stop` was set by the time one was refused. Each refusal is told `refused`, then a pause as a
    client's: 20 ms, doubling up to 500 ms."""
    retrying: AsyncRetrying = AsyncRetrying(
        retry=retry_if_exception_type(grpc.aio.AioRpcError),
        wait=wait_exponential(multiplier=0.02, max=0.5),
        stop=lambda _state: stop.is_set(),
        after=lambda state: refused(_refusal(state)),
        retry_error_callback=lambda _state: None,
    )
    async for attempt in retrying:
        with attempt:
            return await call(attempt.retry_state.attempt_number - 1)
    return None  # stopped: the loop ends with the retry_error_callback's answer unused


def _refusal(state: RetryCallState) -> grpc.aio.AioRpcError:
    error = state.outcome.exception() if state.outcome is not None else None
    if not isinstance(error, grpc.aio.AioRpcError):
        raise AssertionError(f"only refusals are tried again, not {error!r}")
    return error


def thread_of(msg_id: str) -> str:
    """The conversation of a message the load sent (`<prefix>-<sender>-<seq>`)."""
    prefix, sender, seq = msg_id.rsplit("-", 2)
    return f"{prefix}-s{sender}-t{int(seq) % CONVERSATIONS_PER_SENDER}"


@dataclass
class PairHistory:
    """What one user asked of one post, in order."""

    acked: list[bool] = field(default_factory=list)  # acknowledged ops (True: like)
    acked_at: list[float] = field(default_factory=list)  # when (time.monotonic())
    last_sent: bool | None = None
    # Whether the last op sent was acknowledged. When it was not (the load stopped while it was
    # being retried), it may or may not have taken effect: either final state is right.
    last_acked: bool = False

    @property
    def expected(self) -> bool | None:
        """The state the pair must end in (liked or not); None when either is acceptable."""
        return self.acked[-1] if self.last_acked and self.acked else None


@dataclass
class Ledger:
    # The accounts whose messages the accounting reads (a scenario may add its own).
    accounts: set[int] = field(default_factory=lambda: {CHAOS_ACCOUNT})
    sent: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    likes: dict[tuple[int, int], PairHistory] = field(default_factory=dict)
    like_ops_sent: int = 0
    like_ops_acked: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, str] = field(default_factory=dict)
    message_ack_times: list[float] = field(default_factory=list)
    # When each message's batch was acknowledged (time.monotonic()), for reports.
    message_acked_at: dict[str, float] = field(default_factory=dict)
    like_ack_times: list[float] = field(default_factory=list)
    # Forum comments by their unique body: sent, and acknowledged (with when).
    forum_sent: set[str] = field(default_factory=set)
    forum_acked: set[str] = field(default_factory=set)
    forum_ack_times: list[float] = field(default_factory=list)

    def like_sending(
        self, user: int, post: int, like: bool
    ) -> tuple[like_service_pb2.SetLikeRequest, PairHistory]:
        """The request of a like toggle about to be sent, recorded as the pair's latest wish
        (not acknowledged yet), and the pair's history."""
        history = self.likes.setdefault((user, post), PairHistory())
        history.last_sent, history.last_acked = like, False
        self.like_ops_sent += 1
        request = like_service_pb2.SetLikeRequest(
            user_id=user,
            course_id=CHAOS_COURSE,
            target=like_service_pb2.Target(kind=like_service_pb2.TARGET_KIND_POST, id=post),
            like=like,
        )
        return request, history

    def refused(self, error: grpc.aio.AioRpcError, what: str = "") -> None:
        """A call refused (`what` names what was called, when not the chat or likes load), by
        its status code, with the first details of each code as its sample."""
        code = f"{what} {error.code().name}".strip()
        self.errors[code] += 1
        self.error_samples.setdefault(code, error.details() or "")

    def like_acked(self, history: PairHistory, like: bool, at: float) -> None:
        history.acked.append(like)
        history.acked_at.append(at)
        history.last_acked = True
        self.like_ops_acked += 1


@dataclass(frozen=True)
class LikePlan:
    """How the like senders behave.

    Each sender owns a disjoint slice of the users and takes them one at a time: for its user it
    sends, in rounds, one toggle per post (round 0 likes every post, round 1 unlikes them, …),
    each acknowledged before the next, so per (user, post) the order of the ops is the order they
    were acknowledged in. A user gets 2, 3 or 4 rounds (by user id), so pairs end liked and
    unliked alike. `pause` spreads a user's ops over time, so that at any moment many users are
    in the middle of their sequence (what a stale batch applied late would overwrite).
    """

    senders: int = 2
    pause: float = 0.0
    min_rounds: int = 2
    max_rounds: int = 4

    def rounds(self, user: int) -> int:
        return self.min_rounds + user % (self.max_rounds - self.min_rounds + 1)


class Load:
    """Message senders (each owning its conversations, so order is checkable) and like senders
    (each owning its users, so the order of a user's toggles is checkable)."""

    def __init__(
        self,
        ingest_addr: str,
        likes_addr: str,
        prefix: str,
        posts: Sequence[int],
        users: Sequence[int],
        plan: LikePlan | None = None,
        forum_addr: str | None = None,
    ) -> None:
        self._ingest_addr = ingest_addr
        self._likes_addr = likes_addr
        self._forum_addr = forum_addr
        self.prefix = prefix
        self._posts = list(posts)
        self._users = list(users)
        self.plan = plan or LikePlan()
        self.ledger = Ledger()

    async def run(
        self, stop: asyncio.Event, message_senders: int = 3, forum_writers: int = 0
    ) -> None:
        secret = os.environ["TEST_JWT_SECRET"]
        async with (
            # As a Zalo listener delivers messages, and as the gateway forwards likes and forum
            # writes.
            callers.connect(self._ingest_addr, "listener") as ingest,
            callers.connect(self._likes_addr, "gateway", secret=secret) as likes,
            callers.connect(
                self._forum_addr or self._ingest_addr, "gateway", secret=secret
            ) as forum,
        ):
            ingest_stub = ingest_service_pb2_grpc.IngestServiceStub(ingest)
            like_stub = like_service_pb2_grpc.LikeServiceStub(likes)
            forum_stub = forum_write_service_pb2_grpc.ForumWriteServiceStub(forum)
            senders = self.plan.senders
            await asyncio.gather(
                *(self._messages(ingest_stub, k, stop) for k in range(message_senders)),
                *(self._likes(like_stub, self._users[k::senders], stop) for k in range(senders)),
                *(self._comments(forum_stub, k, stop) for k in range(forum_writers)),
            )

    async def _until_acked(
        self, call: Callable[[], Awaitable[object]], stop: asyncio.Event, times: list[float]
    ) -> bool:
        async def acked(_attempt: int) -> bool:
            await call()
            times.append(time.monotonic())
            return True

        return bool(await until_acked(acked, stop, self.ledger.refused))

    async def _messages(
        self, stub: ingest_service_pb2_grpc.IngestServiceStub, sender: int, stop: asyncio.Event
    ) -> None:
        seq = 0
        base = datetime.now(UTC) - timedelta(hours=1)
        while not stop.is_set():
            request = ingest_service_pb2.IngestMessagesRequest(account_id=CHAOS_ACCOUNT)
            ids = []
            for _ in range(BATCH):
                msg_id = f"{self.prefix}-{sender}-{seq}"
                msg = request.messages.add(
                    msg_id=msg_id,
                    thread_id=thread_of(msg_id),
                    thread_type=message_pb2.THREAD_TYPE_USER,
                    direction=message_pb2.DIRECTION_IN,
                    content=f"chaos {seq}",
                )
                msg.sent_at.FromDatetime(base + timedelta(milliseconds=seq))
                ids.append(msg_id)
                seq += 1
            self.ledger.sent.update(ids)

            def call(r: ingest_service_pb2.IngestMessagesRequest = request) -> Awaitable[object]:
                return stub.IngestMessages(r, timeout=RPC_TIMEOUT)  # type: ignore[no-any-return]

            if await self._until_acked(call, stop, self.ledger.message_ack_times):
                self.ledger.acked.update(ids)
                at = self.ledger.message_ack_times[-1]
                self.ledger.message_acked_at.update(dict.fromkeys(ids, at))

    async def _likes(
        self,
        stub: like_service_pb2_grpc.LikeServiceStub,
        users: list[int],
        stop: asyncio.Event,
    ) -> None:
        # Past its last user a sender starts over: the sequences go on where they ended.
        for user in itertools.cycle(users):
            for round_ in range(self.plan.rounds(user)):
                for post in self._posts:
                    if stop.is_set():
                        return
                    await self._toggle(stub, user, post, like=round_ % 2 == 0, stop=stop)
                    if self.plan.pause:
                        await asyncio.sleep(self.plan.pause)

    async def _toggle(
        self,
        stub: like_service_pb2_grpc.LikeServiceStub,
        user: int,
        post: int,
        *,
        like: bool,
        stop: asyncio.Event,
    ) -> None:
        request, history = self.ledger.like_sending(user, post, like)

        def call(r: like_service_pb2.SetLikeRequest = request) -> Awaitable[object]:
            return stub.SetLike(r, timeout=RPC_TIMEOUT)  # type: ignore[no-any-return]

        if await self._until_acked(call, stop, self.ledger.like_ack_times):
            self.ledger.like_acked(history, like, time.monotonic())

    async def _comments(
        self,
        stub: forum_write_service_pb2_grpc.ForumWriteServiceStub,
        writer: int,
        stop: asyncio.Event,
    ) -> None:
        backoff = 0.02
        for seq in itertools.count():
            if stop.is_set():
                return
            body = f"{self.prefix}-f{writer}-{seq}"
            request = forum_write_service_pb2.CreateCommentRequest(
                course_id=CHAOS_COURSE,
                post_id=self._posts[seq % len(self._posts)],
                user_id=self._users[(writer * 7919 + seq) % len(self._users)],
                body=body,
            )
            self.ledger.forum_sent.add(body)
            try:
                await stub.CreateComment(request, timeout=RPC_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                self.ledger.refused(exc, "forum")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
            backoff = 0.02
            self.ledger.forum_acked.add(body)
            self.ledger.forum_ack_times.append(time.monotonic())
