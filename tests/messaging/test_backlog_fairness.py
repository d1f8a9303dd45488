"""One account's flood cannot starve the others on its stream shard.

A shard under pressure (its backlog past MESSAGE_QUEUE_PRESSURE of its bound) refuses the account
sending far more than the shard's other accounts (RESOURCE_EXHAUSTED naming the account, with a
QuotaFailure and a RetryInfo; 429 + Retry-After at the gateway) while the others are still
accepted; an idle shard takes a flood at full speed; the bound itself still refuses everyone
(503). Real Redis (and, on make test's second pass, the test Redis Cluster) and MariaDB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import grpc
import httpx
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from services.ingest.config import IngestSettings
from services.ingest.server import build
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams
from tests.helpers import SHARDS, T0, Flusher, as_listener, message, mint_token
from tests.stack import Env, gateway_settings, serving, serving_gateway

pytestmark = pytest.mark.asyncio

SHARD_BOUND = 200  # messages per stream shard
PRESSURE = 0.5  # fair shares apply past 100 messages on a shard, rates are counted past 25
SHARE = 4.0
NOISY, QUIET, NEWCOMER = 1, 2, 3
SHARD = 0


def fair_settings(base: IngestSettings) -> IngestSettings:
    return base.model_copy(
        update={
            "message_queue_max": SHARD_BOUND * SHARDS,
            "message_queue_pressure": PRESSURE,
            "message_queue_account_share": SHARE,
            # Nothing an account sent is forgotten within a test.
            "message_queue_rate_half_life_seconds": 600.0,
        }
    )


def threads_on(streams: MessageStreams, account: int, shard: int, count: int) -> list[str]:
    """`count` conversations of `account` that hash to `shard`."""
    found = [f"t{i}" for i in range(10_000) if streams.shard_of(account, f"t{i}") == shard][:count]
    assert len(found) == count
    return found


class Sender:
    """Batches of one account to conversations on chosen shards; unique message ids."""

    def __init__(self, streams: MessageStreams, account: int) -> None:
        self.account = account
        self._threads = {s: threads_on(streams, account, s, 3) for s in range(streams.shards)}
        self._seq = 0
        self.accepted: list[str] = []

    def request(self, count: int, shards: tuple[int, ...] = (SHARD,)) -> pb.IngestMessagesRequest:
        request = pb.IngestMessagesRequest(account_id=self.account)
        for i in range(count):
            shard = shards[i % len(shards)]
            threads = self._threads[shard]
            request.messages.append(
                message(
                    f"a{self.account}-{self._seq}",
                    thread=threads[self._seq % len(threads)],
                    sent_at=T0 + timedelta(milliseconds=self._seq),
                )
            )
            self._seq += 1
        return request

    async def send(
        self,
        stub: ingest_service_pb2_grpc.IngestServiceStub,
        count: int,
        shards: tuple[int, ...] = (SHARD,),
    ) -> None:
        request = self.request(count, shards)
        await stub.IngestMessages(request)
        self.accepted += [m.msg_id for m in request.messages]


def quota_subjects(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)
    subjects: list[str] = []
    for detail in status.details if status is not None else []:
        if detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota = error_details_pb2.QuotaFailure()
            detail.Unpack(quota)
            subjects += [v.subject for v in quota.violations]
    return subjects


def retry_delay(error: grpc.aio.AioRpcError) -> float | None:
    status = rpc_status.from_call(error)
    for detail in status.details if status is not None else []:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToTimedelta().total_seconds())
    return None


async def shard_backlog(client: redis.Redis, streams: MessageStreams, shard: int) -> int:
    return int(await client.get(streams.backlog_key(shard)) or 0)


async def stored_ids(db: MysqlDatabase) -> list[str]:
    return sorted(r[0] for r in await db.fetchall("SELECT msg_id FROM zalo_messages"))


@asynccontextmanager
async def fair_ingest(
    settings: IngestSettings,
) -> AsyncIterator[tuple[GrpcServer, ingest_service_pb2_grpc.IngestServiceStub]]:
    async with (
        serving(await build(fair_settings(settings))) as server,
        as_listener(server.port) as channel,
    ):
        yield server, ingest_service_pb2_grpc.IngestServiceStub(channel)


async def test_a_shard_under_pressure_refuses_the_flooding_account_and_accepts_the_others(
    ingest_settings: IngestSettings,
    redis_client: redis.Redis,
    streams: MessageStreams,
    flusher: Flusher,
    admin_db: MysqlDatabase,
) -> None:
    noisy, quiet, newcomer = (Sender(streams, a) for a in (NOISY, QUIET, NEWCOMER))
    async with fair_ingest(ingest_settings) as (_, stub):
        # Below the pressure level the shard takes the flood at full speed.
        for _ in range(3):
            await noisy.send(stub, 10)
        await quiet.send(stub, 5)
        for _ in range(6):
            await noisy.send(stub, 10)
        assert await shard_backlog(redis_client, streams, SHARD) == 95

        # Past it, the account that sent 14× the other's messages is refused, with room left.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await noisy.send(stub, 10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"account {NOISY}" in (refused.value.details() or "")
        assert quota_subjects(refused.value) == [f"account_id:{NOISY}"]
        delay = retry_delay(refused.value)
        assert delay is not None
        assert delay >= 1
        assert await shard_backlog(redis_client, streams, SHARD) == 95 < SHARD_BOUND
        # The counts forget on their own: each key expires after four half-lives.
        assert 0 < await redis_client.pttl(streams.account_rate_key(SHARD, NOISY)) <= 2_400_000

        # A call of the noisy account that takes that shard past the pressure level is refused
        # whole, its part for an idle shard too.
        other_shard = (SHARD + 1) % SHARDS
        with pytest.raises(grpc.aio.AioRpcError) as whole:
            await noisy.send(stub, 20, shards=(other_shard, SHARD))
        assert quota_subjects(whole.value) == [f"account_id:{NOISY}"]
        assert await shard_backlog(redis_client, streams, other_shard) == 0

        # The others on the same shard are still accepted under pressure: the quiet account,
        # and one that has sent nothing yet.
        await quiet.send(stub, 10)
        await newcomer.send(stub, 5)
        assert await shard_backlog(redis_client, streams, SHARD) == 110
        with pytest.raises(grpc.aio.AioRpcError):
            await noisy.send(stub, 10)

        # Once the flusher has drained the shard there is no pressure: the flood goes on.
        await flusher.drain()
        await noisy.send(stub, 10)
        await flusher.drain()
    assert await stored_ids(admin_db) == sorted(noisy.accepted + quiet.accepted + newcomer.accepted)
    assert len(noisy.accepted) == 100


async def test_an_account_alone_on_a_shard_fills_it_to_the_bound(
    ingest_settings: IngestSettings, redis_client: redis.Redis, streams: MessageStreams, clean: None
) -> None:
    """A backfill with nobody else on the shard is refused by the bound alone, as before."""
    backfill = Sender(streams, NOISY)
    count = streams.account_rate_key(SHARD, NOISY)
    async with fair_ingest(ingest_settings) as (_, stub):
        await backfill.send(stub, 10)
        # A shard that keeps up (its backlog far below the pressure level) keeps no count per
        # account: fair shares cost it nothing.
        assert not await redis_client.exists(count)
        for _ in range(SHARD_BOUND // 10 - 1):
            await backfill.send(stub, 10)
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await backfill.send(stub, 10)
    assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "backlog bound" in (full.value.details() or "")
    assert quota_subjects(full.value) == []
    assert await shard_backlog(redis_client, streams, SHARD) == SHARD_BOUND


async def test_the_gateway_answers_the_noisy_account_429_and_a_full_backlog_503(
    env: Env,
    ingest_settings: IngestSettings,
    streams: MessageStreams,
    timeline_server: GrpcServer,
    likes_server: GrpcServer,
    clean: None,
) -> None:
    headers = {"Authorization": f"Bearer {mint_token(env.jwt_secret, sub=7, accounts=[1, 2])}"}
    senders = {a: Sender(streams, a) for a in (NOISY, QUIET)}

    async def post(account: int, count: int) -> httpx.Response:
        request = senders[account].request(count)
        items = [
            {
                "msg_id": m.msg_id,
                "thread_id": m.thread_id,
                "direction": "in",
                "sent_at": m.sent_at.ToDatetime().isoformat() + "Z",
                "content": m.content,
            }
            for m in request.messages
        ]
        return await gateway.post(
            f"/api/zalo-accounts/{account}/messages", json={"messages": items}, headers=headers
        )

    async with fair_ingest(ingest_settings) as (ingest_server, _):
        settings = gateway_settings(env, ingest_server, timeline_server, likes_server)
        async with serving_gateway(settings) as gateway:
            for _ in range(3):
                assert (await post(NOISY, 10)).status_code == 200
            assert (await post(QUIET, 5)).status_code == 200
            for _ in range(6):
                assert (await post(NOISY, 10)).status_code == 200
            noisy = await post(NOISY, 10)
            assert noisy.status_code == 429, noisy.text
            assert int(noisy.headers["Retry-After"]) >= 1
            error = noisy.json()["error"]
            assert error["code"] == "resource_exhausted"
            assert f"account {NOISY}" in error["message"]

            # The quiet account goes on, up to the bound; there everyone is refused alike.
            statuses = [(await post(QUIET, 10)).status_code for _ in range(11)]
            assert statuses == [200] * 10 + [503]
            full = await post(QUIET, 10)
            assert full.status_code == 503
            assert full.headers["Retry-After"] == "1"
            assert full.json()["error"]["code"] == "resource_exhausted"
