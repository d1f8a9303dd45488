"""A service starts whatever its datastores are doing: NOT_SERVING for what cannot work yet,
SERVING once the datastore answers, `liveness` SERVING throughout — never a crash loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import grpc
import pytest
import redis.asyncio as redis
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.domain import schema
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams, MessageStreamSettings
from tests.chaos.harness.proxy import Proxy
from tests.deploy.process_support import (
    FORUM_READ,
    FORUM_WRITE,
    INGEST,
    NOT_SERVING,
    SERVING,
    TIMELINE,
    eventually,
    service_process,
    timeline_datastores,
)
from tests.helpers import SHARDS, as_listener, message
from tests.stack import Env
from tools import callers
from tools.waiting import until

pytestmark = pytest.mark.asyncio


@asynccontextmanager
async def partitioned(url: str) -> AsyncIterator[tuple[str, Proxy]]:
    """`url` through a proxy that starts blackholed (the datastore unreachable)."""
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 0)
    port = await proxy.start()
    proxy.blackhole()
    try:
        yield urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0] + f":{port}")), proxy
    finally:
        await proxy.close()


async def test_ingest_accepts_chat_messages_while_postgres_is_unreachable(
    env: Env, clean: None
) -> None:
    async with (
        partitioned(env.pg_ingest_url) as (pg_url, proxy),
        service_process(
            "ingest",
            {
                "REDIS_URL": env.redis_ingest_url,
                "POSTGRES_URL": pg_url,
                "MYSQL_URL": env.mysql_ingest_url,
                "MESSAGE_STREAM_SHARDS": str(SHARDS),
            },
        ) as port,
    ):
        await eventually(
            port, {"": SERVING, INGEST: SERVING, FORUM_WRITE: NOT_SERVING, "liveness": SERVING}
        )
        async with as_listener(port.api) as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            reply = await stub.IngestMessages(
                pb.IngestMessagesRequest(account_id=1, messages=[message("while-pg-down")]),
                timeout=5,
            )
        assert reply.accepted == 1
        proxy.forward(reset=True)
        await eventually(port, {FORUM_WRITE: SERVING})


async def test_timeline_starts_with_mysql_unreachable_and_serves_when_it_returns(
    env: Env,
) -> None:
    async with (
        partitioned(env.mysql_timeline_url) as (mysql_url, proxy),
        service_process("timeline", timeline_datastores(env, mysql_url=mysql_url)) as port,
    ):
        await eventually(
            port,
            {TIMELINE: NOT_SERVING, FORUM_READ: SERVING, "": SERVING, "liveness": SERVING},
        )
        proxy.forward(reset=True)
        await eventually(port, {TIMELINE: SERVING})


async def test_the_flusher_starts_with_every_datastore_unreachable(env: Env) -> None:
    async with (
        partitioned(env.redis_url) as (redis_url, redis_proxy),
        partitioned(env.mysql_flusher_url) as (mysql_url, mysql_proxy),
        partitioned(env.pg_flusher_url) as (pg_url, pg_proxy),
        service_process(
            "flusher",
            {
                "REDIS_URL": redis_url,
                "MYSQL_URL": mysql_url,
                "POSTGRES_URL": pg_url,
                "FLUSHER_CONSUMER_NAME": "readiness-test",
            },
        ) as port,
    ):
        await eventually(port, {"": NOT_SERVING, "liveness": SERVING})
        for proxy in (redis_proxy, mysql_proxy, pg_proxy):
            proxy.forward(reset=True)
        await eventually(port, {"": SERVING})


@pytest.mark.parametrize("configured", ["false", "true"])
async def test_reflection_only_where_configured(env: Env, configured: str) -> None:
    """Off unless GRPC_REFLECTION=true (the dev stack); never on the plaintext health port."""
    async with service_process(
        "timeline", {**timeline_datastores(env), "GRPC_REFLECTION": configured}
    ) as port:
        await eventually(port, {"liveness": SERVING})

        async def services(channel: grpc.aio.Channel) -> list[str]:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            async for reply in stub.ServerReflectionInfo(iter([request]), timeout=5):
                return [s.name for s in reply.list_services_response.service]
            return []

        async def refusal(channel: grpc.aio.Channel) -> grpc.StatusCode:
            """How a server without reflection answers the stream. No request is sent: the
            server may refuse before a request is written, and the client would then report
            its failed write (INTERNAL) instead of the server's answer."""
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in stub.ServerReflectionInfo(iter([]), timeout=5):
                    pass
            return refused.value.code()

        async with callers.connect(f"127.0.0.1:{port.api}", "operator") as channel:
            if configured == "true":
                assert TIMELINE in await services(channel)
            else:
                assert await refusal(channel) == grpc.StatusCode.UNIMPLEMENTED
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port.health}") as plaintext:
            assert await refusal(plaintext) == grpc.StatusCode.UNIMPLEMENTED


@asynccontextmanager
async def migration_missing(env: Env) -> AsyncIterator[None]:
    """The newest migration of each database unrecorded in dbmate's table (as on a cluster
    where the new image starts before the migration Job ran), recorded again afterwards."""
    mysql_version, pg_version = (
        schema.expected_version("mysql"),
        schema.expected_version("postgres"),
    )
    mysql = await MysqlDatabase.connect(env.mysql_admin_url)
    pg = await asyncpg.connect(env.pg_admin_url)
    try:
        await mysql.execute("DELETE FROM schema_migrations WHERE version = %s", (mysql_version,))
        await pg.execute("DELETE FROM schema_migrations WHERE version = $1", pg_version)
        yield
    finally:
        await mysql.execute(
            "INSERT IGNORE INTO schema_migrations (version) VALUES (%s)", (mysql_version,)
        )
        await pg.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING",
            pg_version,
        )
        await mysql.close()
        await pg.close()


async def test_services_are_not_serving_until_their_schema_is_applied(env: Env) -> None:
    async with (
        migration_missing(env),
        service_process("timeline", timeline_datastores(env)) as port,
    ):
        await eventually(
            port,
            {TIMELINE: NOT_SERVING, FORUM_READ: NOT_SERVING, "": NOT_SERVING, "liveness": SERVING},
        )
    async with service_process("timeline", timeline_datastores(env)) as port:
        await eventually(port, {TIMELINE: SERVING, FORUM_READ: SERVING, "": SERVING})


async def test_the_flusher_consumes_nothing_before_its_schema_is_applied(
    env: Env, clean: None
) -> None:
    client = redis.Redis.from_url(env.redis_url)
    streams = MessageStreams(MessageStreamSettings().message_stream_prefix, SHARDS)
    try:
        async with (
            service_process(
                "ingest",
                {
                    "REDIS_URL": env.redis_ingest_url,
                    "POSTGRES_URL": env.pg_ingest_url,
                    "MYSQL_URL": env.mysql_ingest_url,
                    "MESSAGE_STREAM_SHARDS": str(SHARDS),
                },
            ) as ingest,
            as_listener(ingest.api) as channel,
        ):
            await eventually(ingest, {INGEST: SERVING})
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            reply = await stub.IngestMessages(
                pb.IngestMessagesRequest(account_id=1, messages=[message("before-schema")]),
                timeout=5,
            )
            assert reply.accepted == 1
        flusher_env = {
            "REDIS_URL": env.redis_flusher_url,
            "MYSQL_URL": env.mysql_flusher_url,
            "POSTGRES_URL": env.pg_flusher_url,
            "MESSAGE_STREAM_SHARDS": str(SHARDS),
            "LIKE_STREAM_SHARDS": str(SHARDS),
            "FLUSHER_CONSUMER_NAME": "schema-test",
        }
        async with migration_missing(env), service_process("flusher", flusher_env) as port:
            await eventually(port, {"": NOT_SERVING, "liveness": SERVING})
            await asyncio.sleep(3)
            waiting = sum([await client.xlen(s) for s in streams.all_streams()])
            assert waiting == 1, "the flusher consumed against an old schema"
        async with service_process("flusher", flusher_env) as port:
            await eventually(port, {"": SERVING})

            async def drained() -> bool:
                return sum([await client.xlen(s) for s in streams.all_streams()]) == 0

            await until("the flusher to drain the streams once its schema is applied", drained, 15)
    finally:
        await client.aclose()
