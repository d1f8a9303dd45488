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
from dataclasses import dataclass
from pathlib import Path

from bench.common import Stack
from services.runtime.mysql import MysqlDatabase

ROOT = Path(__file__).resolve().parents[1]
CAP = 500
FIRST_ACCOUNT = 10_000_000
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


def _write(plan: Plan, directory: Path, first_conversation: int, first_message: int) -> list[Path]:
    """The accounts, conversations and message files (tab-separated, LOAD DATA's default)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    with (directory / "accounts.tsv").open("w") as f:
        for account in sorted(set(plan.accounts)):
            f.write(f"{account}\tShop {account}\n")
    files = [directory / "accounts.tsv", directory / "conversations.tsv"]
    conv = directory / "conversations.tsv"
    message_id = first_message
    chunk = 0
    rows_in_chunk = 0
    out = (directory / f"messages-{chunk:03d}.tsv").open("w")
    files.append(directory / f"messages-{chunk:03d}.tsv")
    start = 1_788_000_000  # 2026-08-30 UTC, seconds
    with conv.open("w") as conversations:
        for n, (size, account) in enumerate(zip(plan.sizes, plan.accounts, strict=True)):
            conversation = first_conversation + n
            thread = f"t{conversation}"
            at = start + rng.randrange(0, 86_400 * 60)
            lines = []
            for k in range(size):
                at += rng.randrange(30, 300)
                words = rng.randrange(4, 40)
                content = " ".join(rng.choice(WORDS) for _ in range(words))
                direction = "out" if k % 3 == 2 else "in"
                sent = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
                lines.append(
                    f"{message_id}\t{account}\t{conversation}\tm{conversation}-{k}\t{thread}\tuser"
                    f"\t{direction}\tcustomer-{conversation}\tKhách {conversation}\t{content}"
                    f"\ttext\t{sent}.000\n"
                )
                message_id += 1
            last = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
            conversations.write(f"{conversation}\t{account}\t{thread}\tuser\t{last}.000\n")
            out.writelines(lines)
            rows_in_chunk += size
            if rows_in_chunk >= CHUNK_ROWS:
                out.close()
                chunk += 1
                rows_in_chunk = 0
                out = (directory / f"messages-{chunk:03d}.tsv").open("w")
                files.append(directory / f"messages-{chunk:03d}.tsv")
    out.close()
    return files


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
    t0 = time.perf_counter()
    files = _write(plan, directory, int(row[0]) + 1, int(row[1]) + 1)
    written = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in files)
    t1 = time.perf_counter()
    # Foreign keys and uniqueness are the generator's by construction; checked again by the
    # unique index built at the end.
    session = "SET SESSION foreign_key_checks = 0, unique_checks = 0;"
    await _admin(f"{session} ALTER TABLE zalo_messages {DROP_SECONDARY}")
    try:
        await _admin(
            f"{session} LOAD DATA LOCAL INFILE '{files[0]}' INTO TABLE zalo_accounts"
            " (id, display_name)"
        )
        await _admin(
            f"{session} LOAD DATA LOCAL INFILE '{files[1]}' INTO TABLE zalo_conversations"
            " (id, zalo_account_id, thread_id, thread_type, last_message_at)"
        )
        for f in files[2:]:
            await _admin(
                f"{session} LOAD DATA LOCAL INFILE '{f}' INTO TABLE zalo_messages"
                " (id, zalo_account_id, zalo_conversation_id, msg_id, thread_id, thread_type,"
                " direction, sender_id, sender_name, content, msg_type, sent_at)"
            )
            f.unlink()
        loaded = time.perf_counter() - t1
    finally:
        t2 = time.perf_counter()
        await _admin(f"ALTER TABLE zalo_messages {SECONDARY}, ALGORITHM=INPLACE, LOCK=NONE")
        indexed = time.perf_counter() - t2
    return {
        "rows": float(sum(plan.sizes)),
        "conversations": float(len(plan.sizes)),
        "full_conversations": float(sum(1 for s in plan.sizes if s == CAP)),
        "accounts": float(len(set(plan.accounts))),
        "file_bytes": float(size),
        "generate_s": round(written, 1),
        "load_s": round(loaded, 1),
        "index_s": round(indexed, 1),
        "rows_per_s_overall": sum(plan.sizes) / (written + loaded + indexed),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbox_load", description=__doc__)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument(
        "--dir", type=Path, default=Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "inbox"
    )
    args = parser.parse_args()
    figures = await load(args.rows, args.accounts, args.dir)
    for key, value in figures.items():
        print(f"{key}: {value:,.1f}")


if __name__ == "__main__":
    asyncio.run(main())
