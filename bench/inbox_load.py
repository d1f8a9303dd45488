"""A realistic inbox at scale, loaded the way a bulk import is: generated files, `LOAD DATA`, the
secondary indexes built once at the end (sorted, as an online ALTER of a real migration builds
them) instead of row by row.

  deploy/local/stack.sh run .venv/bin/python -m bench.inbox_load --rows 50000000

The shape: `--accounts` Zalo accounts (100,000 by default, the design's size), whose conversation
counts follow a power law (a few accounts have thousands of conversations, most a handful), and
conversations whose message counts follow a Zipf law (exponent 1.25) capped at the live table's
500: about 18% of conversations are full, the mean is ~120 messages. Messages alternate in and
out at a customer's pace (every 30 s to a few minutes), contents of 20–200 characters of
Vietnamese text. Accounts get ids from 10,000,000 up (clear of the demo, chaos and bench ones);
every run adds a fresh set, so `--rows` is what this run adds.

What it prints: rows and bytes written, load and index-build times, rows per second — the
figures a 50M-row run's preparation is planned from.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import progress
from bench.common import Stack
from services.runtime.mysql import MysqlDatabase

ROOT = Path(__file__).resolve().parents[1]
SECTION = "inbox"
CAP = 500
FIRST_ACCOUNT = 10_000_000
ACCOUNTS = 100_000
CHUNK_ROWS = 1_000_000
ZIPF = 1.25
# A customer's words, drawn at random (what matters is the length and the UTF-8, not the sense).
SENTENCE = (
    "xin chào shop ơi cho mình hỏi đơn hàng này còn không giao khi nào được ạ bạn kiểm tra giúp"
    " mình nhé cảm ơn size màu đỏ xanh giá bao nhiêu có khuyến mãi không địa chỉ số điện thoại"
)
WORDS = SENTENCE.split(" ")
SECONDARY = (
    "ADD UNIQUE KEY zalo_messages_zalo_account_id_msg_id_unique (zalo_account_id, msg_id),"
    " ADD KEY zalo_msg_conv_timeline_idx (zalo_conversation_id, sent_at, id),"
    " ADD KEY zalo_msg_conv_dir_sent_msg_idx (zalo_conversation_id, direction, sent_at, msg_id)"
)
DROP_SECONDARY = (
    "DROP KEY zalo_messages_zalo_account_id_msg_id_unique, DROP KEY zalo_msg_conv_timeline_idx,"
    " DROP KEY zalo_msg_conv_dir_sent_msg_idx"
)


@dataclass
class Plan:
    """Conversation sizes and their accounts, drawn once from the seed."""

    sizes: list[int]
    accounts: list[int]

    @classmethod
    def draw(cls, rows: int, accounts: int, seed: int = 2026) -> Plan:
        rng = random.Random(seed)
        sizes: list[int] = []
        total = 0
        while total < rows:
            # Inverse-transform Zipf (continuous Pareto, floored), capped at the live table's 500.
            size = min(CAP, int((1 - rng.random()) ** (-1 / (ZIPF - 1))))
            size = min(size, rows - total)
            sizes.append(size)
            total += size
        # Conversations per account: a power law over account ranks (a few large shops).
        weights = [1 / (rank + 1) ** 0.8 for rank in range(accounts)]
        owners = rng.choices(range(accounts), weights=weights, k=len(sizes))
        return cls(sizes, [FIRST_ACCOUNT + o for o in owners])


class Files:
    """The plan as tab-separated files (LOAD DATA's default), written a chunk at a time so the
    next chunk is generated while the last one loads."""

    def __init__(
        self, plan: Plan, directory: Path, first_conversation: int, first_message: int
    ) -> None:
        self.plan = plan
        self.directory = directory
        self.first_conversation = first_conversation
        self.first_message = first_message
        self.bytes = 0
        directory.mkdir(parents=True, exist_ok=True)

    def accounts(self) -> Path:
        path = self.directory / "accounts.tsv"
        with path.open("w") as f:
            for account in sorted(set(self.plan.accounts)):
                f.write(f"{account}\tShop {account}\n")
        return path

    def conversations(self) -> Path:
        """Written while the message chunks are (each conversation's last message time)."""
        return self.directory / "conversations.tsv"

    def message_chunks(self) -> Iterator[Path]:
        rng = random.Random(7)
        message_id = self.first_message
        start = 1_788_000_000  # 2026-08-30 UTC, seconds
        lines: list[str] = []
        chunk = 0
        with self.conversations().open("w") as conversations:
            for n, (size, account) in enumerate(
                zip(self.plan.sizes, self.plan.accounts, strict=True)
            ):
                conversation = self.first_conversation + n
                thread = f"t{conversation}"
                at = start + rng.randrange(0, 86_400 * 60)
                for k in range(size):
                    at += rng.randrange(30, 300)
                    content = " ".join(rng.choices(WORDS, k=rng.randrange(4, 40)))
                    direction = "out" if k % 3 == 2 else "in"
                    sent = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
                    lines.append(
                        f"{message_id}\t{account}\t{conversation}\tm{conversation}-{k}\t{thread}"
                        f"\tuser\t{direction}\tcustomer-{conversation}\tKhách {conversation}"
                        f"\t{content}\ttext\t{sent}.000\n"
                    )
                    message_id += 1
                last = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
                conversations.write(f"{conversation}\t{account}\t{thread}\tuser\t{last}.000\n")
                if len(lines) >= CHUNK_ROWS:
                    yield self._chunk(chunk, lines)
                    chunk += 1
                    lines = []
            if lines:
                yield self._chunk(chunk, lines)

    def _chunk(self, n: int, lines: list[str]) -> Path:
        path = self.directory / f"messages-{n:03d}.tsv"
        with path.open("w") as f:
            f.writelines(lines)
        self.bytes += path.stat().st_size
        return path


async def _admin(statement: str) -> None:
    """As the administrator over the socket, LOAD DATA LOCAL allowed (stack.sh's mysql_root)."""
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    socket = Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "run" / "mysqld.sock"
    proc = await asyncio.create_subprocess_exec(
        "mariadb",
        "--no-defaults",
        "--local-infile=1",
        f"--socket={socket}",
        "-u",
        user,
        "agora",
        "-e",
        statement,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{statement[:80]}…: {err.decode().strip()}")


async def load(rows: int, accounts: int, directory: Path) -> dict[str, float]:
    stack = Stack.from_env()
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        row = await db.fetchone(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM zalo_conversations),"
            " (SELECT COALESCE(MAX(id), 0) FROM zalo_messages),"
            " (SELECT COALESCE(MAX(id), 0) FROM zalo_accounts)"
        )
    finally:
        await db.close()
    assert row is not None
    plan = Plan.draw(rows, accounts)
    shift = max(0, int(row[2]) + 1 - FIRST_ACCOUNT)
    plan.accounts = [a + shift for a in plan.accounts]
    files = Files(plan, directory, int(row[0]) + 1, int(row[1]) + 1)
    started = time.perf_counter()
    # Foreign keys and uniqueness hold by construction; the unique index built at the end checks
    # the latter again.
    session = "SET SESSION foreign_key_checks = 0, unique_checks = 0;"
    await _admin(f"{session} ALTER TABLE zalo_messages {DROP_SECONDARY}")
    try:
        await _admin(
            f"{session} LOAD DATA LOCAL INFILE '{files.accounts()}' INTO TABLE zalo_accounts"
            " (id, display_name)"
        )
        chunks = files.message_chunks()
        # The next chunk is generated (a thread: Python) while this one loads (the server).
        following = asyncio.create_task(asyncio.to_thread(next, chunks, None))
        done = 0
        while (chunk := await following) is not None:
            following = asyncio.create_task(asyncio.to_thread(next, chunks, None))
            await _admin(
                f"{session} LOAD DATA LOCAL INFILE '{chunk}' INTO TABLE zalo_messages"
                " (id, zalo_account_id, zalo_conversation_id, msg_id, thread_id, thread_type,"
                " direction, sender_id, sender_name, content, msg_type, sent_at)"
            )
            chunk.unlink()
            done += CHUNK_ROWS
            progress.percent(SECTION, f"loading {rows:,} inbox rows", min(done, rows), rows)
        await _admin(
            f"{session} LOAD DATA LOCAL INFILE '{files.conversations()}'"
            " INTO TABLE zalo_conversations"
            " (id, zalo_account_id, thread_id, thread_type, last_message_at)"
        )
        loaded = time.perf_counter() - started
    finally:
        indexing = time.perf_counter()
        progress.say(SECTION, "building the secondary indexes")
        await _admin(f"ALTER TABLE zalo_messages {SECONDARY}, ALGORITHM=INPLACE, LOCK=NONE")
        indexed = time.perf_counter() - indexing
    await _admin("ANALYZE TABLE zalo_messages, zalo_conversations")
    return {
        "rows": float(sum(plan.sizes)),
        "conversations": float(len(plan.sizes)),
        "full_conversations": float(sum(1 for s in plan.sizes if s == CAP)),
        "accounts": float(len(set(plan.accounts))),
        "file_bytes": float(files.bytes),
        "generate_and_load_s": round(loaded, 1),
        "index_s": round(indexed, 1),
        "rows_per_s_overall": sum(plan.sizes) / (loaded + indexed),
    }


def files_dir() -> Path:
    """Where the generated files go while they load (each removed once loaded)."""
    return Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "inbox"


async def present(db: MysqlDatabase) -> bool:
    """Whether an inbox load's accounts are in the table."""
    return (
        await db.fetchone("SELECT 1 FROM zalo_accounts WHERE id >= %s LIMIT 1", (FIRST_ACCOUNT,))
        is not None
    )


async def top_up(stack: Stack, total: int) -> dict[str, float]:
    """Load inbox rows until zalo_messages holds `total` rows (nothing when it already does)."""
    db = await MysqlDatabase.connect(stack.mysql_admin_url)
    try:
        row = await db.fetchone("SELECT COUNT(*) FROM zalo_messages")
    finally:
        await db.close()
    missing = total - int(row[0] if row else 0)
    if missing <= 0:
        return {}
    return await load(
        missing, ACCOUNTS, Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "inbox"
    )


async def remove(db: MysqlDatabase, step: int = 10_000) -> int:
    """Take every inbox load out (its messages, conversations, accounts); the rows removed.

    The rows that stay (the measured account, demo and chaos data: a few million at most) are
    copied into a twin table that then takes the live table's name, instead of deleting tens of
    millions of rows one by one and leaving InnoDB's purge to chew on them during the next
    measurement. A bench tool on an idle stack: rows written into the old table during the copy
    would be dropped with it.
    """
    before = await table_rows_of(db, "zalo_messages")
    create = str((await db.fetchone("SHOW CREATE TABLE zalo_messages"))[1])  # type: ignore[index]
    foreign_keys = [
        line.strip().rstrip(",") for line in create.splitlines() if "FOREIGN KEY" in line
    ]
    # One session (the client, no deadline): foreign keys are re-added by name once the old
    # table is gone.
    statements = [
        "SET SESSION foreign_key_checks = 0",
        "DROP TABLE IF EXISTS zalo_messages_kept, zalo_messages_inbox_gone",
        "CREATE TABLE zalo_messages_kept LIKE zalo_messages",
        "INSERT INTO zalo_messages_kept SELECT * FROM zalo_messages"
        f" WHERE zalo_account_id < {FIRST_ACCOUNT}",
        "RENAME TABLE zalo_messages TO zalo_messages_inbox_gone,"
        " zalo_messages_kept TO zalo_messages",
        "DROP TABLE zalo_messages_inbox_gone",
        *(f"ALTER TABLE zalo_messages ADD {fk}" for fk in foreign_keys),
    ]
    progress.say(SECTION, "removing the inbox load: copying the rows that stay")
    await _admin("; ".join(statements))
    ids = [
        int(r[0])
        for r in await db.fetchall(
            "SELECT id FROM zalo_conversations WHERE zalo_account_id >= %s ORDER BY id",
            (FIRST_ACCOUNT,),
        )
    ]
    for start in range(0, len(ids), step):
        await db.execute(
            "DELETE FROM zalo_conversations WHERE id BETWEEN %s AND %s AND zalo_account_id >= %s",
            (ids[start], ids[min(start + step, len(ids)) - 1], FIRST_ACCOUNT),
        )
        progress.percent(
            SECTION, "removing the inbox's conversations", min(start + step, len(ids)), len(ids)
        )
    await db.execute("DELETE FROM zalo_accounts WHERE id >= %s", (FIRST_ACCOUNT,))
    await db.execute("ANALYZE TABLE zalo_messages")
    return before - await table_rows_of(db, "zalo_messages")


async def table_rows_of(db: MysqlDatabase, table: str) -> int:
    row = await db.fetchone(f"SELECT COUNT(*) FROM {table}")
    return int(row[0]) if row else 0


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbox_load", description=__doc__)
    parser.add_argument("--rows", type=int, help="inbox rows to add")
    parser.add_argument("--accounts", type=int, default=ACCOUNTS)
    parser.add_argument("--remove", action="store_true", help="delete every inbox load instead")
    parser.add_argument("--dir", type=Path, default=files_dir())
    args = parser.parse_args()
    if args.remove:
        db = await MysqlDatabase.connect(Stack.from_env().mysql_admin_url)
        try:
            print(f"deleted {await remove(db):,} rows")
        finally:
            await db.close()
        return
    if not args.rows:
        parser.error("--rows or --remove")
    figures = await load(args.rows, args.accounts, args.dir)
    for key, value in figures.items():
        print(f"{key}: {value:,.1f}")


if __name__ == "__main__":
    asyncio.run(main())
