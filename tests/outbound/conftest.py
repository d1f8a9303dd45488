"""Fixtures of the reply tests: an ingest process of their own with short leases and a quick
pace (so takeovers and pacing are seen in seconds), its three APIs as their callers reach them,
and a few conversations to reply in."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from agora.messaging.v1 import (
    ingest_service_pb2_grpc,
    listener_service_pb2_grpc,
    outbound_service_pb2_grpc,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.ingest import server as ingest_service
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from tests.helpers import as_listener, gateway_stub
from tests.outbound.support import (
    CONVERSATIONS,
    OUTBOUND_SETTINGS,
    QUOTABLE,
    Listeners,
)
from tests.stack import Env, ingest_settings_for, serving


@pytest_asyncio.fixture(scope="session")
async def outbound_server(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    """ingest with OUTBOUND_SETTINGS, serving."""
    settings = ingest_settings_for(env, **OUTBOUND_SETTINGS)
    async with serving(await ingest_service.build(settings)) as server:
        yield server


@pytest_asyncio.fixture(scope="session")
async def outbound(
    env: Env, outbound_server: GrpcServer
) -> AsyncIterator[outbound_service_pb2_grpc.OutboundServiceStub]:
    """OutboundService as the gateway calls it, for the user each request names."""
    async with gateway_stub(
        outbound_server.port, env.jwt_secret, outbound_service_pb2_grpc.OutboundServiceStub
    ) as stub:
        yield stub


@pytest_asyncio.fixture(scope="session")
async def listener_ingest(
    outbound_server: GrpcServer,
) -> AsyncIterator[ingest_service_pb2_grpc.IngestServiceStub]:
    """IngestService as a listener calls it (receipts are a listener's alone)."""
    async with as_listener(outbound_server.port) as channel:
        yield ingest_service_pb2_grpc.IngestServiceStub(channel)


@pytest_asyncio.fixture
async def listeners(outbound_server: GrpcServer) -> AsyncIterator[Listeners]:
    """Listener processes' streams, each on its own connection; cancelled afterwards."""
    async with as_listener(outbound_server.port) as channel:
        group = Listeners(listener_service_pb2_grpc.ListenerServiceStub(channel))
        try:
            yield group
        finally:
            await group.close()


@pytest_asyncio.fixture
async def replies(clean: None, admin_db: MysqlDatabase) -> None:
    """`clean` (which empties the reply tables too); CONVERSATIONS to reply in, QUOTABLE stored in
    theirs (one of them archived)."""
    async with admin_db.connection() as conn:
        await conn.executemany(
            """INSERT INTO zalo_conversations (zalo_account_id, thread_id, last_message_at)
            VALUES (%s, %s, '2026-08-02 10:00:00')""",
            CONVERSATIONS,
        )
        for n, (archived, account, thread, msg_id) in enumerate(QUOTABLE, start=1000):
            # An archived row keeps its id from zalo_messages (the archive has no AUTO_INCREMENT).
            table = "zalo_messages_archive" if archived else "zalo_messages"
            await conn.execute(
                f"""INSERT INTO {table} (id, zalo_account_id, zalo_conversation_id, msg_id,
                thread_id, direction, content, sent_at{", sent_date" if archived else ""})
                SELECT %s, zalo_account_id, id, %s, thread_id, 'in', 'hello',
                '2026-08-02 10:00:00'{", '2026-08-02'" if archived else ""}
                FROM zalo_conversations WHERE zalo_account_id = %s AND thread_id = %s""",
                (n, msg_id, account, thread),
            )
