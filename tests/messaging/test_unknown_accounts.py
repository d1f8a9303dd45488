"""Ingest refuses, at once, a call for a Zalo account the database does not know (NOT_FOUND naming
account_id): the flusher could only dead-letter it on the conversations → accounts foreign key.
Known accounts are cached, so steady-state calls make no database round trip; unknown ones are
cached briefly, so a newly registered account is accepted within seconds. With MySQL unreachable
a cached account is still accepted and an unknown one is UNAVAILABLE (retry), never accepted
blindly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.ingest import server as ingest_service
from services.ingest.accounts import KNOWN_ACCOUNTS
from services.ingest.config import IngestSettings
from services.runtime.grpc_errors import FieldViolation, field_violations
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from services.runtime.service import Service
from services.streams.entries import FIELD_ERROR
from services.streams.likes import LikeStreams
from services.streams.messages import MessageStreams
from services.streams.replay import Replayer
from tests.chaos.harness.proxy import Proxy
from tests.helpers import Flusher, as_listener, at, dead_letter_count, message, outcome
from tests.stack import Env, serving

pytestmark = pytest.mark.asyncio
UNKNOWN = FieldViolation("account_id", "no Zalo account has this id")


def batch(account_id: int, *msg_ids: str) -> pb.IngestMessagesRequest:
    return pb.IngestMessagesRequest(
        account_id=account_id,
        messages=[message(m, sent_at=at(n)) for n, m in enumerate(msg_ids)],
    )


async def failure(call: Awaitable[object]) -> tuple[grpc.StatusCode, list[FieldViolation]]:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    return error.value.code(), field_violations(error.value)


async def until(call: Any, expected: grpc.StatusCode, meanwhile: grpc.StatusCode) -> None:
    """Repeat `call()` until it ends with `expected`, each earlier try with `meanwhile`."""
    for _ in range(50):
        code = await outcome(call())
        if code == expected:
            return
        assert code == meanwhile
        await asyncio.sleep(0.2)
    pytest.fail(f"still {meanwhile.name} after 10 s")


async def stream_length(client: redis.Redis, streams: MessageStreams) -> int:
    return sum([await client.xlen(s) for s in streams.all_streams()])


@asynccontextmanager
async def listener_stub(
    server: GrpcServer,
) -> AsyncIterator[ingest_service_pb2_grpc.IngestServiceStub]:
    async with as_listener(server.port) as channel:
        yield ingest_service_pb2_grpc.IngestServiceStub(channel)


@asynccontextmanager
async def own_ingest(settings: IngestSettings, **overrides: Any) -> AsyncIterator[GrpcServer]:
    """An ingest of this test's own (its own account cache), these settings overridden."""
    async with own_service(settings, **overrides) as (_, server):
        yield server


@asynccontextmanager
async def own_service(
    settings: IngestSettings, **overrides: Any
) -> AsyncIterator[tuple[Service, GrpcServer]]:
    built = await ingest_service.build(settings.model_copy(update=overrides))
    async with serving(built) as server:
        yield built, server


async def test_every_rpc_refuses_an_account_the_database_does_not_know(
    ingest_server: GrpcServer,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    redis_client: redis.Redis,
    streams: MessageStreams,
    clean: None,
) -> None:
    async with listener_stub(ingest_server) as listener:
        refused = await failure(listener.IngestMessages(batch(999, "m1")))
        assert refused == (grpc.StatusCode.NOT_FOUND, [UNKNOWN])
        # The known account's call is unaffected.
        assert (await listener.IngestMessages(batch(1, "m1"))).accepted == 1
    # MarkRead and RecordAgentSent are the gateway's calls.
    read = pb.MarkReadRequest(account_id=999, conversation_key="t1")
    assert await failure(ingest.MarkRead(read)) == (grpc.StatusCode.NOT_FOUND, [UNKNOWN])
    sent = pb.RecordAgentSentRequest(account_id=999, thread_id="t1", cli_msg_id="c1")
    assert await failure(ingest.RecordAgentSent(sent)) == (grpc.StatusCode.NOT_FOUND, [UNKNOWN])
    assert await stream_length(redis_client, streams) == 1


async def test_a_known_account_costs_no_database_round_trip_per_call(
    ingest_settings: IngestSettings, spans: InMemorySpanExporter, clean: None
) -> None:
    async with own_ingest(ingest_settings) as server, listener_stub(server) as listener:
        spans.clear()
        for n in range(20):
            assert (await listener.IngestMessages(batch(1, f"m{n}"))).accepted == 1
    # Ingest's own look-ups: another component of this process (the search indexer's sweep of
    # every account, beside the suite's flusher) may read zalo_accounts meanwhile.
    read = [str((s.attributes or {}).get("db.query.text", "")) for s in spans.get_finished_spans()]
    lookups = [sql for sql in read if sql.startswith(KNOWN_ACCOUNTS)]
    assert len(lookups) == 1, [sql for sql in read if "zalo_accounts" in sql]


async def test_a_newly_registered_account_is_accepted_within_seconds(
    ingest_server: GrpcServer, admin_db: MysqlDatabase, clean: None
) -> None:
    async with listener_stub(ingest_server) as listener:
        code, _ = await failure(listener.IngestMessages(batch(4242, "m1")))
        assert code == grpc.StatusCode.NOT_FOUND
        await admin_db.execute("INSERT INTO zalo_accounts (id, display_name) VALUES (4242, 'new')")
        started = asyncio.get_running_loop().time()
        await until(
            lambda: listener.IngestMessages(batch(4242, "m1")),
            grpc.StatusCode.OK,
            grpc.StatusCode.NOT_FOUND,
        )
        assert asyncio.get_running_loop().time() - started < 5


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[tuple[str, Proxy]]:
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 0)
    port = await proxy.start()
    try:
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
        yield urlunsplit(parts._replace(netloc=netloc)), proxy
    finally:
        await proxy.close()


@pytest.mark.parametrize("outage", ["blackhole", "refuse"])
async def test_with_mysql_away_a_known_account_is_accepted_and_an_unknown_one_unavailable(
    ingest_settings: IngestSettings, env: Env, clean: None, outage: str
) -> None:
    async with (
        proxied(env.mysql_ingest_url) as (url, proxy),
        own_service(
            ingest_settings,
            mysql_url=url,
            mysql_timeout_seconds=0.5,
            account_cache_known_seconds=0.2,
        ) as (service, server),
        listener_stub(server) as listener,
    ):
        assert (await listener.IngestMessages(batch(1, "before"))).accepted == 1
        getattr(proxy, outage)()
        await asyncio.sleep(0.5)  # account 1's answer is stale now: its refresh fails
        # Chat ingest stays in rotation: MySQL is no dependency of its health.
        readiness = service.readiness()
        assert readiness is not None
        assert (await readiness.check())[ingest_service.MESSAGING] is True
        for n in range(3):
            reply = await listener.IngestMessages(batch(1, f"during-{n}"), timeout=5)
            assert reply.accepted == 1
        code, _ = await failure(listener.IngestMessages(batch(2, "unknown"), timeout=5))
        assert code == grpc.StatusCode.UNAVAILABLE
        proxy.forward(reset=True)
        await until(
            lambda: listener.IngestMessages(batch(2, "after")),
            grpc.StatusCode.OK,
            grpc.StatusCode.UNAVAILABLE,
        )


async def test_a_deleted_account_is_refused_in_time_and_its_queued_messages_are_replayable(
    ingest_settings: IngestSettings,
    flusher: Flusher,
    admin_db: MysqlDatabase,
    redis_client: redis.Redis,
    streams: MessageStreams,
) -> None:
    async with (
        own_ingest(ingest_settings, account_cache_known_seconds=1) as server,
        listener_stub(server) as listener,
    ):
        assert (await listener.IngestMessages(batch(3, "queued-1", "queued-2"))).accepted == 2
        await admin_db.execute("DELETE FROM zalo_accounts WHERE id = 3")
        await flusher.drain()
        assert await dead_letter_count(redis_client, streams) == 2
        letters: list[tuple[str, str, dict[bytes, bytes]]] = []
        for dead in streams.all_dead_letters():
            found: Any = await redis_client.xrange(dead)
            letters += [(dead, letter_id.decode(), fields) for letter_id, fields in found]
        assert all(b"foreign key" in f[FIELD_ERROR].lower() for _, _, f in letters)

        # Once the cache's lifetime is over, ingest refuses it.
        await until(
            lambda: listener.IngestMessages(batch(3, "late")),
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.OK,
        )

        await admin_db.execute("INSERT INTO zalo_accounts (id, display_name) VALUES (3, 'back')")
        replayer = Replayer(redis_client, streams, LikeStreams.from_settings(flusher.settings))
        for dead, letter_id, fields in letters:
            assert (await replayer.replay(dead, letter_id, fields)).new_id is not None
        await flusher.drain()
    stored = await admin_db.fetchall("SELECT msg_id FROM zalo_messages WHERE zalo_account_id = 3")
    # With what was accepted for it before the cache learnt of the deletion ("late").
    assert {"queued-1", "queued-2"} <= {r[0] for r in stored}
    assert await dead_letter_count(redis_client, streams) == 0
