"""End to end: gRPC IngestMessages batches → Redis stream → flusher → committed in MariaDB.

The clock stops when the stream backlog is back to zero: the flusher acknowledges an entry only
after its transaction committed, so zero means every message sent is in MariaDB.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import grpc
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc, message_pb2

from bench import progress
from bench.common import E2E_ACCOUNT, Stack, as_listener
from services.runtime import redis_client
from services.runtime.mysql import MysqlDatabase
from services.streams.messages import MessageStreams, MessageStreamSettings
from services.streams.monitor import counters_sum


@dataclass(frozen=True)
class IngestRun:
    messages: int
    acknowledged_per_s: float
    committed_per_s: float
    stored: int
    # Batches refused with RESOURCE_EXHAUSTED or UNAVAILABLE and sent again.
    retries: int = 0


def requests(
    run: str, messages: int, batch: int, conversations: int
) -> list[pb.IngestMessagesRequest]:
    """IngestMessages requests, built before the clock starts."""
    base = datetime.now(UTC) - timedelta(days=1)
    built = []
    for start in range(0, messages, batch):
        request = pb.IngestMessagesRequest(account_id=E2E_ACCOUNT)
        for i in range(start, min(start + batch, messages)):
            msg = request.messages.add(
                msg_id=f"{run}-{i}",
                thread_id=f"{run}-t{i % conversations}",
                thread_type=message_pb2.THREAD_TYPE_USER,
                direction=message_pb2.DIRECTION_IN if i % 3 else message_pb2.DIRECTION_OUT,
                sender_id=f"customer-{i % conversations}",
                sender_name="Khách hàng",
                content=f"Tin nhắn thử số {i}, nội dung dài vừa phải như một tin nhắn chat.",
                msg_type="webchat",
            )
            if i % 5 == 0:
                msg.attachments = '[{"type": "photo", "url": "https://example.com/p.jpg"}]'
            msg.sent_at.FromDatetime(base + timedelta(milliseconds=i))
        built.append(request)
    return built


async def remove_earlier_runs(admin: MysqlDatabase, chunk: int = 50) -> None:
    """Delete what earlier runs ingested, so every run meets the same table (not one 200k rows
    larger each time) and the timeline data set stays the size the report says; then let InnoDB
    finish purging."""
    while ids := [
        int(r[0])
        for r in await admin.fetchall(
            "SELECT id FROM zalo_conversations WHERE zalo_account_id = %s LIMIT %s",
            (E2E_ACCOUNT, chunk),
        )
    ]:
        marks = ", ".join(["%s"] * len(ids))
        await admin.execute(
            f"DELETE FROM zalo_messages WHERE zalo_conversation_id IN ({marks})", ids
        )
        await admin.execute(f"DELETE FROM zalo_conversations WHERE id IN ({marks})", ids)
    # Deleted rows are purged in the background; a run measured during the purge would pay for
    # the previous run's size (prune off leaves 8x more rows than prune on).
    for _ in range(600):
        row = await admin.fetchone("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'")
        if row is None or int(row[1]) < 1000:
            break
        await asyncio.sleep(0.2)


async def run_ingest(
    stack: Stack,
    *,
    messages: int,
    batch: int = 200,
    concurrency: int = 8,
    shards: int = 8,
    conversations: int = 1000,
    section: str = "ingest",
    ingest_addr: str | None = None,
    redis_url: str | None = None,
    redis_cluster: bool = False,
    stream_prefix: str | None = None,
) -> IngestRun:
    """`messages` through the stack's ingest and flusher, or through the ingest at
    `ingest_addr` whose flusher drains the streams under `stream_prefix` on `redis_url` (a
    Redis Cluster node when `redis_cluster`)."""
    admin = await MysqlDatabase.connect(stack.mysql_admin_url)
    client = redis_client.connect(redis_url or stack.redis_url, cluster=redis_cluster)
    prefix = stream_prefix or MessageStreamSettings().message_stream_prefix
    streams = MessageStreams(prefix, shards)
    backlog_keys = [streams.backlog_key(s) for s in range(shards)]
    run = f"e2e{time.time_ns()}"
    try:
        await remove_earlier_runs(admin)
        await admin.execute(
            "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench e2e')",
            (E2E_ACCOUNT,),
        )
        payloads = requests(run, messages, batch, conversations=conversations)
        retries = 0
        async with as_listener(ingest_addr or stack.ingest_addr) as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            queue: asyncio.Queue[pb.IngestMessagesRequest] = asyncio.Queue()
            for payload in payloads:
                queue.put_nowait(payload)
            label = f"sending {messages:,} messages"

            async def sender() -> None:
                nonlocal retries
                while not queue.empty():
                    request = queue.get_nowait()
                    while True:
                        try:
                            await stub.IngestMessages(request, timeout=30)
                            break
                        except grpc.aio.AioRpcError as exc:
                            # Backlog full, or a datastore unavailable: keep the batch and retry,
                            # as a forwarder does (ingest deduplicates by msg_id).
                            if exc.code() not in (
                                grpc.StatusCode.RESOURCE_EXHAUSTED,
                                grpc.StatusCode.UNAVAILABLE,
                            ):
                                raise
                            retries += 1
                            await asyncio.sleep(0.05)
                    progress.percent(section, label, len(payloads) - queue.qsize(), len(payloads))

            started = time.perf_counter()
            await asyncio.gather(*(sender() for _ in range(concurrency)))
            acknowledged = time.perf_counter() - started
            while (backlog := int(await counters_sum(client, backlog_keys))) > 0:
                progress.percent(
                    section, "flusher draining the backlog", messages - backlog, messages
                )
                await asyncio.sleep(0.01)
            committed = time.perf_counter() - started
        row = await admin.fetchone(
            "SELECT COUNT(*) FROM zalo_messages WHERE zalo_account_id = %s AND msg_id LIKE %s",
            (E2E_ACCOUNT, f"{run}-%"),
        )
        return IngestRun(
            messages=messages,
            acknowledged_per_s=messages / acknowledged,
            committed_per_s=messages / committed,
            stored=int(row[0]) if row else 0,
            retries=retries,
        )
    finally:
        await admin.close()
        await client.aclose()
