"""A read or a write whose reply is lost with its connection: the client re-sends it, and that
must neither reorder entries nor surface as anything but a ConnectionError."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError

from services import keyspace
from services.runtime import lua
from services.runtime.redis_client import _ClosedUnderUs

pytestmark = pytest.mark.asyncio

STREAM = keyspace.family("messages.events").key(shard=0)
LEASE, EPOCH = (
    keyspace.family("messages.lease").key(shard=0),
    keyspace.family("messages.lease_epoch").key(shard=0),
)


async def test_a_re_sent_read_returns_the_entries_the_lost_reply_carried(
    redis_client: redis.Redis, clean: None
) -> None:
    await redis_client.xgroup_create(STREAM, "flusher", id="0", mkstream=True)
    ids = [await redis_client.xadd(STREAM, {"n": str(i)}) for i in range(3)]
    await redis_client.set(LEASE, "me")
    await redis_client.set(EPOCH, "1")
    read = redis_client.register_script(lua.source("services.streams.consumer", "read_new"))
    args: list[str | int | bytes] = ["flusher", "c", 2, "me", "1", "0"]

    lost: Any = await read(keys=[STREAM, LEASE, EPOCH], args=args)  # its reply never arrives
    again: Any = await read(keys=[STREAM, LEASE, EPOCH], args=args)

    assert [entry_id for entry_id, _ in lost[1]] == ids[:2]
    # The re-sent read gives the same two back (oldest first), not the third before them.
    assert [entry_id for entry_id, _ in again[1]] == ids[:2]
    # Holding those two, the next read goes on with the third.
    after: Any = await read(keys=[STREAM, LEASE, EPOCH], args=[*args[:5], ids[1]])
    assert [entry_id for entry_id, _ in after[1]] == ids[2:]


class _Transport:
    async def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'NoneType' object has no attribute 'writelines'")

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the handler is closed")

    async def disconnect(self, nowait: bool = False) -> None:
        self.disconnected = nowait


class _Guarded(_ClosedUnderUs, _Transport):
    pass


async def test_a_connection_closed_under_a_command_is_a_connection_error() -> None:
    """What redis-py's cluster client does to connections in use during a failover."""
    connection = _Guarded()
    with pytest.raises(RedisConnectionError, match="closed under a command"):
        await connection.send_packed_command(b"PING")
    with pytest.raises(RedisConnectionError, match="closed under a command"):
        await connection.read_response()
    assert connection.disconnected
