"""Test helpers: message factories, an in-process flusher drain, tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis.asyncio as redis
from agora.messaging.v1 import message_pb2

from services.flusher.config import FlusherSettings
from services.flusher.message_repository import MessageRepository
from services.flusher.prune import Pruner
from services.flusher.server import message_consumer, pruner
from services.runtime.mysql import MysqlDatabase
from tools.jwt_token import mint

ACCOUNTS = (1, 2, 3)
T0 = datetime(2026, 8, 2, 10, 0, tzinfo=UTC)


def mint_token(secret: str, *, sub: int, accounts: list[int], ttl: int = 3600) -> str:
    return mint(secret, sub, accounts, ttl)


def message(
    msg_id: str,
    *,
    thread: str = "t1",
    sent_at: datetime = T0,
    direction: message_pb2.Direction = message_pb2.DIRECTION_IN,
    **fields: Any,
) -> message_pb2.Message:
    """A valid message; keyword arguments override fields."""
    msg = message_pb2.Message(
        msg_id=msg_id,
        thread_id=thread,
        thread_type=message_pb2.THREAD_TYPE_USER,
        direction=direction,
        sender_id="s1",
        sender_name="Sender",
        content=f"content of {msg_id}",
        msg_type="webchat",
        **fields,
    )
    msg.sent_at.FromDatetime(sent_at)
    return msg


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


class Flusher:
    """Runs the real message consumers of every shard until the streams are drained."""

    def __init__(self, settings: FlusherSettings, client: redis.Redis, db: MysqlDatabase) -> None:
        self.settings = settings
        self.db = db
        self.redis = client
        self.repo = MessageRepository(db)
        self.consumers = [
            message_consumer(settings, client, self.repo, shard)
            for shard in range(settings.message_stream_shards)
        ]

    async def drain(self) -> int:
        """Apply everything pending or new; returns the number of entries handled."""
        handled = 0
        for consumer in self.consumers:
            await consumer.ensure_group()
            await consumer.claim_abandoned()
            while n := await consumer.run_once():
                handled += n
        return handled

    def pruner(self, **overrides: Any) -> Pruner:
        """The real pruner with these settings overridden (e.g. archive_enabled=True)."""
        settings = self.settings.model_copy(update=overrides)
        return pruner(settings, self.redis, self.db)
