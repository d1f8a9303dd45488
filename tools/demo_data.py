"""Load the demo data of the local stack (idempotent: fixed ids, so a reload changes nothing).

Zalo accounts are registered outside this system, so they are inserted directly, with their
teams (tools/team_data.py); messages go through the real path: gRPC ingest → stream → flusher
→ MariaDB. The forum gets the small lab
(tools/forum_data.py) and a realistic volume: 2,000 courses, 50,000 students, 20,000 posts,
268,000 comments.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta

import asyncpg
from agora.messaging.v1 import ingest_service_pb2, ingest_service_pb2_grpc, message_pb2

from services.runtime.mysql import MysqlDatabase
from tools import callers
from tools.forum_data import Volume, load_lab, load_volume, load_volume_people
from tools.team_data import load_team
from tools.waiting import NeverHappened, until

ACCOUNTS = {1: "Demo Shop", 2: "Demo Clinic", 3: "Demo School"}
BASE = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def demo_messages(account_id: int, thread_no: int, count: int) -> list[message_pb2.Message]:
    """A conversation's messages, two incoming for one outgoing, every tenth quoting another."""
    thread = f"demo-thread-{thread_no}"
    messages = []
    for i in range(count):
        incoming = i % 3 != 2
        # Every fifth message shares its sent_at with the one before: the (sent_at, id) order shows.
        step = i - 1 if i % 5 == 1 else i
        sent = BASE + timedelta(minutes=7 * thread_no, seconds=30 * step)
        msg = message_pb2.Message(
            msg_id=f"demo-{account_id}-{thread_no}-{i}",
            thread_id=thread,
            thread_type=message_pb2.THREAD_TYPE_USER,
            direction=message_pb2.DIRECTION_IN if incoming else message_pb2.DIRECTION_OUT,
            sender_id=f"customer-{thread_no}" if incoming else f"account-{account_id}",
            sender_name=f"Khách hàng {thread_no}" if incoming else ACCOUNTS[account_id],
            content=f"Tin nhắn số {i} của hội thoại {thread_no}",
            msg_type="webchat",
        )
        if i % 10 == 9:
            msg.quote.msg_id = f"demo-{account_id}-{thread_no}-{i - 1}"
            msg.quote.payload = f'{{"msg": "Tin nhắn số {i - 1}"}}'
        msg.sent_at.FromDatetime(sent)
        messages.append(msg)
    return messages


async def load() -> int:
    port, password = os.environ["MYSQL_PORT"], os.environ["MYSQL_MIGRATOR_PASSWORD"]
    db = await MysqlDatabase.connect(f"mysql://agora_migrator:{password}@127.0.0.1:{port}/agora")
    try:
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, %s) "
                "ON DUPLICATE KEY UPDATE display_name = VALUES(display_name)",
                sorted(ACCOUNTS.items()),
            )
            # Who works each account, and the canned replies of account 1 (tools/team_data.py).
            await load_team(tx)
        batches = [
            (account, demo_messages(account, thread, 120 if account == 1 else 40))
            for account in (1, 2)
            for thread in range(1, 6 if account == 1 else 3)
        ]
        expected = sum(len(m) for _, m in batches)
        # As a Zalo listener would deliver them.
        async with callers.connect(f"127.0.0.1:{os.environ['INGEST_PORT']}", "listener") as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            for account, messages in batches:
                reply = await stub.IngestMessages(
                    ingest_service_pb2.IngestMessagesRequest(account_id=account, messages=messages),
                    timeout=10,
                )
                if reply.rejected:
                    raise SystemExit(f"demo data rejected: {reply.rejected[0]}")

        async def flushed() -> bool:
            # Per demo account and msg_id prefix, so the count rides the (account, msg_id)
            # unique index: a bare LIKE scans the whole live table, minutes at 50M rows.
            row = await db.fetchone(
                "SELECT COUNT(*) FROM zalo_messages"
                " WHERE zalo_account_id IN (1, 2) AND msg_id LIKE 'demo-%%'"
            )
            return row is not None and int(row[0]) >= expected

        try:
            await until("the demo messages to be flushed", flushed, 60)
        except NeverHappened:
            raise SystemExit("demo messages were not flushed within 60 s (make logs)") from None
        return expected
    finally:
        await db.close()


async def load_forum() -> bool:
    e = os.environ
    conn = await asyncpg.connect(
        f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}@127.0.0.1:{e['PG_PORT']}/agora"
    )
    try:
        await load_lab(conn)
        loaded = await load_volume(conn, Volume())
        await load_volume_people(conn, Volume())
        return loaded
    finally:
        await conn.close()


def main() -> None:
    count = asyncio.run(load())
    print(f"demo data: Zalo accounts {sorted(ACCOUNTS)}, {count} messages in 7 conversations")
    print("demo data: agents (user 1 owner of 1-3; 7 agent of 1, 2; 8 of 1, 3), 3 canned replies")
    loaded = asyncio.run(load_forum())
    volume = Volume()
    print(
        "demo data: forum lab (course 42: posts 1, 2; course 99: post 3; users 7, 8, 9 in 42)"
        f"{' + ' if loaded else ', '}{volume.courses:,} courses, {volume.students:,} students,"
        f" {volume.courses * volume.posts_per_course:,} posts, {volume.comments:,} comments"
        f"{'' if loaded else ' (already loaded)'}"
    )


if __name__ == "__main__":
    main()
