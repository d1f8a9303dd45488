"""Steady load of uniquely identified messages and likes, sent the way a real forwarder does:
a batch or a like is retried until it is acknowledged; every attempt and ack is in the ledger."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import grpc
from agora.forum.v1 import like_service_pb2, like_service_pb2_grpc
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc, message_pb2

CHAOS_ACCOUNT = 777
CHAOS_COURSE = 4242
BATCH = 20
CONVERSATIONS_PER_SENDER = 5


@dataclass
class Ledger:
    sent: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    like_sent: set[tuple[int, int]] = field(default_factory=set)
    like_acked: set[tuple[int, int]] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, str] = field(default_factory=dict)
    message_ack_times: list[float] = field(default_factory=list)
    like_ack_times: list[float] = field(default_factory=list)


class Load:
    """Message senders (each owning its conversations, so order is checkable) and like senders."""

    def __init__(
        self, ingest_addr: str, likes_addr: str, prefix: str, posts: list[int], users: list[int]
    ) -> None:
        self._ingest_addr = ingest_addr
        self._likes_addr = likes_addr
        self.prefix = prefix
        self._pairs = [(u, p) for p in posts for u in users]
        self.ledger = Ledger()

    async def run(
        self, stop: asyncio.Event, message_senders: int = 3, like_senders: int = 2
    ) -> None:
        async with (
            grpc.aio.insecure_channel(self._ingest_addr) as ingest,
            grpc.aio.insecure_channel(self._likes_addr) as likes,
        ):
            ingest_stub = ingest_service_pb2_grpc.IngestServiceStub(ingest)
            like_stub = like_service_pb2_grpc.LikeServiceStub(likes)
            pairs = iter(self._pairs)
            await asyncio.gather(
                *(self._messages(ingest_stub, k, stop) for k in range(message_senders)),
                *(self._likes(like_stub, pairs, stop) for _ in range(like_senders)),
            )

    async def _until_acked(self, call: object, stop: asyncio.Event, times: list[float]) -> bool:
        backoff = 0.02
        while True:
            try:
                await call()  # type: ignore[operator]
                times.append(time.monotonic())
                return True
            except grpc.aio.AioRpcError as exc:
                self.ledger.errors[exc.code().name] += 1
                self.ledger.error_samples.setdefault(exc.code().name, exc.details() or "")
            if stop.is_set():
                return False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

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
                    thread_id=f"{self.prefix}-s{sender}-t{seq % CONVERSATIONS_PER_SENDER}",
                    thread_type=message_pb2.THREAD_TYPE_USER,
                    direction=message_pb2.DIRECTION_IN,
                    content=f"chaos {seq}",
                )
                msg.sent_at.FromDatetime(base + timedelta(milliseconds=seq))
                ids.append(msg_id)
                seq += 1
            self.ledger.sent.update(ids)
            call = lambda r=request: stub.IngestMessages(r, timeout=3)  # noqa: E731
            if await self._until_acked(call, stop, self.ledger.message_ack_times):
                self.ledger.acked.update(ids)

    async def _likes(
        self,
        stub: like_service_pb2_grpc.LikeServiceStub,
        pairs: object,
        stop: asyncio.Event,
    ) -> None:
        for user, post in pairs:  # type: ignore[attr-defined]
            if stop.is_set():
                return
            request = like_service_pb2.SetLikeRequest(
                user_id=user,
                course_id=CHAOS_COURSE,
                target=like_service_pb2.Target(kind=like_service_pb2.TARGET_KIND_POST, id=post),
                like=True,
            )
            self.ledger.like_sent.add((user, post))
            call = lambda r=request: stub.SetLike(r, timeout=3)  # noqa: E731
            if await self._until_acked(call, stop, self.ledger.like_ack_times):
                self.ledger.like_acked.add((user, post))
