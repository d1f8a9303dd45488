"""The search bench's data: a shop inbox's Vietnamese chat, the index at millions of documents, and
the accounts the queries ask (their messages in MariaDB too, since a hit is read back from there).

- Text: deterministic by seed; stock lines of a customer-service chat and runs of words drawn with
  Zipf-like weights from a vocabulary of common syllables (tones, đ, one-letter words), plus a few
  rare words; some messages typed without marks. The query mix (QUERIES) names words and phrases
  of known frequency in it.
- Background: documents written straight into search_messages (services/search/terms.document's
  text, COPY in chunks) for BACKGROUND_ACCOUNTS accounts the bench never queries; MariaDB holds
  none of them. Loaded once: each chunk's last document is its marker, so a second run skips
  what is there (and an interrupted fill goes on where it stopped).
- Queried accounts: QUERIED accounts with `per_account` messages each in zalo_messages, indexed by
  tools/reindex.py's rebuild with the flusher's identity (as `make reindex` runs it).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import unicodedata
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from bench import progress
from bench.common import ROOT, Stack
from services.domain.search_text import words
from services.runtime.mysql import MysqlDatabase
from services.search.terms import account_tenant

SECTION = "search"
# Accounts of the index the queries never ask (nothing in MariaDB), and those they ask.
BACKGROUND_BASE = 3_000_000
QUERIED_BASE = 920_000
QUERIED = 20
# The background's accounts: fixed, so that every size lays documents out alike (a run at 5M goes
# on from what a run at 1M loaded); 5M documents make about 2,500 an account.
BACKGROUND_ACCOUNTS = 2000
THREADS_PER_ACCOUNT = 50
# Documents per COPY (and per marker).
CHUNK = 50_000

_COLUMNS = ["zalo_account_id", "msg_id", "thread_id", "message_id", "sent_at", "terms"]
# Most frequent first: a draw's weight is 1/rank (Zipf).
_COMMON = (  # noqa: SIM905 (a sentence-like list reads better as text)
    "ạ em shop ơi cho hỏi giá bao nhiêu có không còn hàng đơn giao và là ở ship bạn anh chị "
    "được rồi nhé với của này mình mua sản phẩm size màu nào ừ vâng dạ thì cần gửi địa chỉ "
    "số điện thoại khi nhận tiền chuyển khoản đặt thêm cái một hai ba lấy đổi trả hoàn "
    "ngày mai hôm nay tuần sau kem dưỡng da mặt son môi nước hoa sữa rửa đường dương "
    "đương hoà hòa khoẻ khỏe thuỷ thủy tuỳ tùy loại tốt đẹp rẻ đắt giảm mãi miễn phí mã lỗi "
    "hỏng bảo hành đúng sai cảm ơn xin chào tư vấn giúp nhanh chậm đến tới chưa đã đang sẽ "
    "vậy sao gì đâu ai nhiều ít lắm quá rất thật cũng vẫn nữa luôn tháng năm giờ phút sáng "
    "chiều tối quận huyện phường thành phố nội minh nẵng thơ nhà trường ý á ô ê ờ zalo link "
    "ảnh hình video xem thử dùng thấy"
).split()
_LINES = (
    "shop ơi cho em hỏi giá",
    "đơn hàng của em giao chưa ạ",
    "giao hàng mất bao lâu vậy shop",
    "em chuyển khoản rồi nhé",
    "còn size nhỏ không ạ",
    "cảm ơn shop nhiều",
    "dạ vâng em gửi địa chỉ",
)
# Lines of known frequency, for the query mix: (line, share of messages).
_MARKED = (("xịt chống nắng còn hàng không ạ", 0.02), ("em muốn khiếu nại đơn hôm qua", 0.002))


@dataclass(frozen=True)
class Probe:
    """One query of the mix: what a person types, and what it is."""

    name: str
    text: str


QUERIES = (
    Probe("common word", "hàng"),
    Probe("rare word", "khiếu"),
    Probe("phrase with marks", "chống nắng"),
    Probe("phrase without marks", "chong nang"),
)


def _unmarked(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text.replace("đ", "d").replace("Đ", "D"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


class Chat:
    """Messages as a shop's inbox holds them, deterministic by seed."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._weights = [1 / (rank + 1) for rank in range(len(_COMMON))]

    def message(self) -> str:
        rng = self._rng
        roll = rng.random()
        parts: list[str] = []
        edge = 0.0
        for line, share in _MARKED:
            edge += share
            if roll < edge:
                parts.append(line)
                break
        if not parts and roll < 0.3:
            parts.append(rng.choice(_LINES))
        parts.append(" ".join(rng.choices(_COMMON, self._weights, k=rng.randint(3, 12))))
        text = " ".join(parts)
        # Some people type without marks.
        return _unmarked(text) if rng.random() < 0.15 else text


class Documents:
    """search_messages rows as COPY text, built from a vocabulary normalised once (the
    normalisation is services/domain/search_text.words(), the same the indexer applies)."""

    def __init__(self, seed: int) -> None:
        self._chat = Chat(seed)
        self._words: dict[str, list[tuple[str, str]]] = {}

    def _normalised(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for token in text.split(" "):
            if token not in self._words:
                self._words[token] = [(w.folded, w.exact) for w in words(token)]
            out += self._words[token]
        return out

    def terms(self, account: int, text: str) -> str:
        """services/search/terms.document(account_tenant(account), text), for these words."""
        tenant = account_tenant(account)
        return " ".join(
            f"'{tenant}:{folded}':{p} '{tenant}={exact}':{p}"
            for p, (folded, exact) in enumerate(self._normalised(text), start=1)
        )

    def rows(self, first: int, count: int, accounts: int, start: datetime) -> bytes:
        """Documents first..first+count-1, spread round-robin over `accounts` accounts."""
        lines = []
        for n in range(first, first + count):
            account = BACKGROUND_BASE + n % accounts
            sent = (start + timedelta(seconds=n)).isoformat()
            thread = f"bg{n // accounts % THREADS_PER_ACCOUNT}"
            terms = self.terms(account, self._chat.message())
            lines.append(f"{account}\tbg{n}\t{thread}\t{n + 1}\t{sent}\t{terms}\n")
        return "".join(lines).encode()


def _last_of_chunk(first: int, count: int, accounts: int) -> tuple[int, str]:
    n = first + count - 1
    return BACKGROUND_BASE + n % accounts, f"bg{n}"


async def fill_background(stack: Stack, total: int, accounts: int = BACKGROUND_ACCOUNTS) -> int:
    """search_messages holds documents bg0..bg<total-1> of the background accounts; returns how
    many this call wrote (0 when an earlier run loaded them)."""
    conn = await asyncpg.connect(stack.pg_admin_url)
    written = 0
    try:
        # A larger pending list: the GIN index takes the COPY's entries in bigger sorted merges.
        await conn.execute("SET gin_pending_list_limit = '64MB'")
        docs = Documents(seed=11)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        started = time.perf_counter()
        for first in range(0, total, CHUNK):
            count = min(CHUNK, total - first)
            account, msg_id = _last_of_chunk(first, count, accounts)
            there = await conn.fetchval(
                "SELECT 1 FROM search_messages WHERE zalo_account_id = $1 AND msg_id = $2",
                account,
                msg_id,
            )
            if there:
                continue
            data = docs.rows(first, count, accounts, start)
            # A chunk is one transaction: present whole or not at all, but for the last chunk
            # of a smaller run, which a larger one replaces.
            smaller = await conn.fetchval(
                "SELECT 1 FROM search_messages WHERE zalo_account_id = $1 AND msg_id = $2",
                BACKGROUND_BASE + first % accounts,
                f"bg{first}",
            )
            async with conn.transaction():
                if smaller:
                    await conn.execute(
                        "DELETE FROM search_messages s USING unnest($1::bigint[], $2::text[])"
                        " AS d (account, msg_id)"
                        " WHERE s.zalo_account_id = d.account AND s.msg_id = d.msg_id",
                        [BACKGROUND_BASE + n % accounts for n in range(first, first + count)],
                        [f"bg{n}" for n in range(first, first + count)],
                    )
                await conn.copy_to_table(
                    "search_messages",
                    source=_chunks(data),
                    columns=_COLUMNS,
                    format="text",
                )
            written += count
            rate = written / (time.perf_counter() - started)
            progress.percent(
                SECTION, f"index documents ({rate:,.0f}/s)", first + count, total, every=5.0
            )
        if written:
            progress.say(SECTION, "VACUUM ANALYZE search_messages (flushes the GIN pending list)")
            await conn.execute("VACUUM ANALYZE search_messages")
        return written
    finally:
        await conn.close()


async def _chunks(data: bytes, size: int = 1 << 20) -> AsyncIterator[bytes]:
    """COPY's source: the chunk's text in pieces."""
    for at in range(0, len(data), size):
        yield data[at : at + size]


async def index_size(stack: Stack) -> int:
    conn = await asyncpg.connect(stack.pg_admin_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM search_messages"))
    finally:
        await conn.close()


def queried_accounts() -> list[int]:
    return list(range(QUERIED_BASE, QUERIED_BASE + QUERIED))


def _queried_messages(
    account: int, per_account: int
) -> Iterator[tuple[int, str, str, str, str, datetime]]:
    chat = Chat(seed=account)
    start = datetime(2026, 6, 1)
    for n in range(per_account):
        yield (
            account,
            f"q{account}-{n}",
            f"qt{account}-{n % THREADS_PER_ACCOUNT}",
            "in" if n % 3 else "out",
            chat.message(),
            start + timedelta(seconds=37 * n),
        )


async def load_queried(stack: Stack, per_account: int) -> int:
    """The queried accounts' messages in MariaDB and in the index; returns the accounts loaded
    now (0 when an earlier run did)."""
    db = await MysqlDatabase.connect(stack.mysql_admin_url, timeout=600)
    todo: list[int] = []
    try:
        for account in queried_accounts():
            row = await db.fetchone(
                "SELECT COUNT(*) FROM zalo_messages WHERE zalo_account_id = %s", (account,)
            )
            if row and int(row[0]) == per_account:
                continue
            todo.append(account)
            await _load_account(db, account, per_account)
            progress.percent(SECTION, "queried accounts into MariaDB", len(todo), QUERIED)
    finally:
        await db.close()
    if todo:
        await reindex(todo)
    return len(todo)


async def _load_account(db: MysqlDatabase, account: int, per_account: int) -> None:
    await db.execute("DELETE FROM zalo_messages WHERE zalo_account_id = %s", (account,))
    await db.execute("DELETE FROM zalo_conversations WHERE zalo_account_id = %s", (account,))
    await db.execute(
        "INSERT IGNORE INTO zalo_accounts (id, display_name) VALUES (%s, 'bench search')",
        (account,),
    )
    async with db.transaction() as tx:
        await tx.executemany(
            "INSERT INTO zalo_conversations"
            " (zalo_account_id, thread_id, thread_type, last_message_at)"
            " VALUES (%s, %s, 'user', '2026-10-01 00:00:00')",
            [(account, f"qt{account}-{t}") for t in range(THREADS_PER_ACCOUNT)],
        )
    conversation = {
        str(r[1]): int(r[0])
        for r in await db.fetchall(
            "SELECT id, thread_id FROM zalo_conversations WHERE zalo_account_id = %s", (account,)
        )
    }
    rows = [
        (a, conversation[t], m, t, d, text, at)
        for a, m, t, d, text, at in _queried_messages(account, per_account)
    ]
    for start in range(0, len(rows), 1000):
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT INTO zalo_messages (zalo_account_id, zalo_conversation_id, msg_id,"
                " thread_id, thread_type, direction, sender_id, sender_name, content, msg_type,"
                " sent_at) VALUES (%s, %s, %s, %s, 'user', %s, 'customer', 'Khách hàng', %s,"
                " 'webchat', %s)",
                rows[start : start + 1000],
            )


async def reindex(accounts: list[int]) -> None:
    """tools/reindex.py for `accounts`, with the flusher's identity and settings, as `make
    reindex` runs it."""
    progress.say(SECTION, f"make reindex of {len(accounts)} accounts")
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "deploy/local/run-service.sh"),
        "flusher",
        str(ROOT / ".venv/bin/python"),
        "-m",
        "tools.reindex",
        "--accounts",
        ",".join(map(str, accounts)),
        env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode:
        raise SystemExit(f"reindex failed: {out.decode(errors='replace')[-1500:]}")
    progress.say(SECTION, out.decode(errors="replace").strip().splitlines()[-1])
