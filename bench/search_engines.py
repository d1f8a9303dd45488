"""Which engine serves the inbox's and the forum's search: each candidate loaded with the same
Vietnamese corpus (bench/search_corpus.py) and measured the same way.

Candidates (docs/search.md, "The engine"):
  a  PostgreSQL, tenant-prefixed lexemes ("a42:xit", "a42=xit~5") in one GIN index (the design)
  b  PostgreSQL, plain lexemes ("xit", "=xit~5") in a composite GIN (account_id, terms), btree_gin
  c  PostgreSQL, pg_trgm over the folded and exact word strings, composite GIN (account_id,
     folded gin_trgm_ops), LIKE per word, ranked in SQL
  d  MariaDB InnoDB FULLTEXT on folded and exact columns (min token 1, no stopwords), boolean
     mode, account filter
  e  tantivy (in process), folded and exact text fields with positions, account/conversation terms

For each: bulk load throughput (load plus index build), then live inserts in small batches with
the index in place, size on disk, latency of the first page of 20 ranked results with the count
of matches for a fixed query mix over small, medium and the biggest accounts, and the result
sets compared with services/domain/search_text.py's match() over the same messages (the oracle).

The servers are private ones the caller starts (never the project's stack): PostgreSQL via
--pg-dsn, MariaDB via --mysql-socket. tantivy is not a project dependency: --tantivy-site names
the site-packages of a venv holding it. Results: JSON (--json, written after each candidate) and
a Markdown report on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import pymysql

from bench.search_corpus import Corpus, check, vocabulary
from services.domain.search_text import Query, match

PAGE = 20
LIVE_BATCH = 200

Hit = tuple[int, int]  # (kind, message id)
Result = tuple[int, list[Hit]]  # (count of matches, first page)
# What a search cut short by its statement timeout returns (recorded as a timeout, not a result).
TIMED_OUT: Result = (-1, [])
CACHE_LIMIT: Result = (-2, [])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Row:
    id: int
    account: int
    conversation: int
    sent_at: int
    exact: tuple[str, ...]
    folded: tuple[str, ...]


@dataclass(frozen=True)
class Probe:
    """One query of the mix, for one tenant (optionally one conversation)."""

    name: str
    text: str
    account: int
    conversation: int | None
    tenant_class: str


def read_rows(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            i, a, c, s, e, fo = line.rstrip("\n").split("\t")
            yield Row(int(i), int(a), int(c), int(s), tuple(e.split(" ")), tuple(fo.split(" ")))


class Engine(Protocol):
    name: str

    def bulk(self, rows: Path, count: int) -> None: ...
    def live(self, rows: list[Row]) -> None: ...
    def size(self) -> int: ...
    def search(self, q: Query, account: int, conversation: int | None) -> Result: ...
    def close(self) -> None: ...


# --- PostgreSQL ---------------------------------------------------------------------------


def _tsv(lexemes: Callable[[str, str], tuple[str, str]], row: Row) -> str:
    pos: dict[str, list[int]] = defaultdict(list)
    for i, (e, f) in enumerate(zip(row.exact, row.folded, strict=True), start=1):
        le, lf = lexemes(e, f)
        if i <= 16383:
            pos[le].append(i)
            pos[lf].append(i)
    return " ".join(f"'{lx}':{','.join(map(str, ps[:256]))}" for lx, ps in pos.items())


def _phrase(lexemes: list[str]) -> str:
    return " <-> ".join(f"'{x}'" for x in lexemes)


def _all(lexemes: list[str]) -> str:
    return " & ".join(f"'{x}'" for x in lexemes)


class _Pg:
    name = ""
    table = ""
    types: tuple[str, ...] = ("bigint", "text", "text", "bigint", "timestamptz", "tsvector")

    def __init__(self, dsn: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.conn: asyncpg.Connection = loop.run_until_complete(asyncpg.connect(dsn))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def columns(self, row: Row) -> list[str]:
        raise NotImplementedError

    def ddl(self) -> list[str]:
        raise NotImplementedError

    def indexes(self) -> list[str]:
        raise NotImplementedError

    def bulk(self, rows: Path, count: int) -> None:
        for sql in self.ddl():
            self.run(self.conn.execute(sql))
        copy_file = rows.with_suffix(f".{self.name}.copy")
        with copy_file.open("w", encoding="utf-8") as out:
            for r in read_rows(rows):
                out.write("\t".join(self.columns(r)) + "\n")
        t0 = time.perf_counter()
        self.run(self.conn.copy_to_table(self.table, source=copy_file, format="text"))
        t1 = time.perf_counter()
        for sql in self.indexes():
            self.run(self.conn.execute(sql))
        self.run(self.conn.execute(f"VACUUM ANALYZE {self.table}"))
        t2 = time.perf_counter()
        self.timings = {"copy_s": t1 - t0, "index_s": t2 - t1}
        copy_file.unlink()

    def live(self, rows: list[Row]) -> None:
        cols = [self.columns(r) for r in rows]
        n = len(cols[0])
        placeholders = ", ".join(f"${i + 1}::text[]" for i in range(n))
        typed = ", ".join(f"c{i}::{t}" for i, t in enumerate(self.types))
        names = ", ".join(f"c{i}" for i in range(n))
        sql = f"INSERT INTO {self.table} SELECT {typed} FROM unnest({placeholders}) AS u({names})"
        for lo in range(0, len(cols), LIVE_BATCH):
            chunk = cols[lo : lo + LIVE_BATCH]
            self.run(self.conn.execute(sql, *[[c[i] for c in chunk] for i in range(n)]))

    def size(self) -> int:
        got = self.run(
            self.conn.fetchval("SELECT pg_total_relation_size($1::regclass)", self.table)
        )
        self.index_bytes = self.run(
            self.conn.fetchval("SELECT pg_indexes_size($1::regclass)", self.table)
        )
        return int(got)

    def close(self) -> None:
        self.run(self.conn.close())

    def flush_pending(self) -> None:
        names = self.run(
            self.conn.fetch(
                "SELECT indexrelid::regclass::text AS name FROM pg_index i JOIN pg_class c"
                " ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam"
                " WHERE indrelid = $1::regclass AND am.amname = 'gin'",
                self.table,
            )
        )
        for n in names:
            self.run(self.conn.execute("SELECT gin_clean_pending_list($1::regclass)", n["name"]))


class PgPrefixed(_Pg):
    """(a) The design: every lexeme carries its tenant, one GIN index over all of them."""

    name = "a"
    table = "sm_prefixed"

    def ddl(self) -> list[str]:
        return [
            f"DROP TABLE IF EXISTS {self.table}",
            f"""CREATE TABLE {self.table} (zalo_account_id bigint NOT NULL, msg_id text NOT NULL,
                thread_id text NOT NULL, message_id bigint NOT NULL, sent_at timestamptz NOT NULL,
                terms tsvector NOT NULL)""",
        ]

    def indexes(self) -> list[str]:
        return [
            f"ALTER TABLE {self.table} ADD PRIMARY KEY (zalo_account_id, msg_id)",
            f"CREATE INDEX {self.table}_terms ON {self.table} USING gin (terms)",
        ]

    def columns(self, r: Row) -> list[str]:
        p = f"a{r.account}"
        tsv = _tsv(lambda e, f: (f"{p}={e}", f"{p}:{f}"), r)
        ts = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(r.sent_at))
        return [str(r.account), f"m{r.id}", f"t{r.conversation}", str(r.id), ts, tsv]

    def search(self, q: Query, account: int, conversation: int | None) -> Result:
        p = f"a{account}"
        ex = [f"{p}={w}" for w in q.exact]
        fo = [f"{p}:{w}" for w in q.folded]
        thread = "AND thread_id = $5" if conversation is not None else ""
        args: list[Any] = [_phrase(ex), _all(ex), _phrase(fo), _all(fo)]
        if conversation is not None:
            args.append(f"t{conversation}")
        sql = f"""
            SELECT message_id, kind, count(*) OVER () AS n FROM (
              SELECT message_id, sent_at,
                CASE WHEN terms @@ $1::tsquery THEN 1 WHEN terms @@ $2::tsquery THEN 2
                     WHEN terms @@ $3::tsquery THEN 3 ELSE 4 END AS kind
              FROM {self.table} WHERE terms @@ $4::tsquery {thread}) m
            ORDER BY kind, sent_at DESC, message_id DESC LIMIT {PAGE}"""
        rows = self.run(self.conn.fetch(sql, *args))
        return (rows[0]["n"] if rows else 0), [(r["kind"], r["message_id"]) for r in rows]


class PgComposite(PgPrefixed):
    """(b) Plain lexemes and a composite GIN (account, terms): the tenant is an index column."""

    name = "b"
    table = "sm_composite"

    def indexes(self) -> list[str]:
        return [
            "CREATE EXTENSION IF NOT EXISTS btree_gin",
            f"ALTER TABLE {self.table} ADD PRIMARY KEY (zalo_account_id, msg_id)",
            f"CREATE INDEX {self.table}_terms ON {self.table} USING gin (zalo_account_id, terms)",
        ]

    def columns(self, r: Row) -> list[str]:
        cols = super().columns(r)
        cols[5] = _tsv(lambda e, f: (f"={e}", f), r)
        return cols

    def search(self, q: Query, account: int, conversation: int | None) -> Result:
        ex = [f"={w}" for w in q.exact]
        fo = list(q.folded)
        thread = "AND thread_id = $6" if conversation is not None else ""
        args: list[Any] = [_phrase(ex), _all(ex), _phrase(fo), _all(fo), account]
        if conversation is not None:
            args.append(f"t{conversation}")
        sql = f"""
            SELECT message_id, kind, count(*) OVER () AS n FROM (
              SELECT message_id, sent_at,
                CASE WHEN terms @@ $1::tsquery THEN 1 WHEN terms @@ $2::tsquery THEN 2
                     WHEN terms @@ $3::tsquery THEN 3 ELSE 4 END AS kind
              FROM {self.table} WHERE zalo_account_id = $5 AND terms @@ $4::tsquery {thread}) m
            ORDER BY kind, sent_at DESC, message_id DESC LIMIT {PAGE}"""
        rows = self.run(self.conn.fetch(sql, *args))
        return (rows[0]["n"] if rows else 0), [(r["kind"], r["message_id"]) for r in rows]


class PgTrigram(_Pg):
    """(c) pg_trgm over the folded words (what unaccent(lower()) gives, with đ read as d), a
    word found by LIKE '% w %' on the space-padded string."""

    name = "c"
    table = "sm_trigram"
    types = ("bigint", "text", "text", "bigint", "timestamptz", "text", "text")

    def ddl(self) -> list[str]:
        return [
            f"DROP TABLE IF EXISTS {self.table}",
            f"""CREATE TABLE {self.table} (zalo_account_id bigint NOT NULL, msg_id text NOT NULL,
                thread_id text NOT NULL, message_id bigint NOT NULL, sent_at timestamptz NOT NULL,
                folded text NOT NULL, exact text NOT NULL)""",
        ]

    def indexes(self) -> list[str]:
        return [
            "CREATE EXTENSION IF NOT EXISTS btree_gin",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            f"ALTER TABLE {self.table} ADD PRIMARY KEY (zalo_account_id, msg_id)",
            f"""CREATE INDEX {self.table}_folded ON {self.table}
                USING gin (zalo_account_id, folded gin_trgm_ops)""",
        ]

    def columns(self, r: Row) -> list[str]:
        ts = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(r.sent_at))
        return [
            str(r.account),
            f"m{r.id}",
            f"t{r.conversation}",
            str(r.id),
            ts,
            " " + " ".join(r.folded) + " ",
            " " + " ".join(r.exact) + " ",
        ]

    def search(self, q: Query, account: int, conversation: int | None) -> Result:
        args: list[Any] = [account]

        def arg(v: str) -> str:
            args.append(v)
            return f"${len(args)}"

        ex_phrase = arg("% " + " ".join(q.exact) + " %")
        ex_all = " AND ".join(f"exact LIKE {arg(f'% {w} %')}" for w in q.exact)
        fo_phrase = arg("% " + " ".join(q.folded) + " %")
        fo_all = " AND ".join(f"folded LIKE {arg(f'% {w} %')}" for w in dict.fromkeys(q.folded))
        thread = f"AND thread_id = {arg(f't{conversation}')}" if conversation is not None else ""
        sql = f"""
            SELECT message_id, kind, count(*) OVER () AS n FROM (
              SELECT message_id, sent_at,
                CASE WHEN exact LIKE {ex_phrase} THEN 1 WHEN {ex_all} THEN 2
                     WHEN folded LIKE {fo_phrase} THEN 3 ELSE 4 END AS kind
              FROM {self.table} WHERE zalo_account_id = $1 AND {fo_all} {thread}) m
            ORDER BY kind, sent_at DESC, message_id DESC LIMIT {PAGE}"""
        rows = self.run(self.conn.fetch(sql, *args))
        return (rows[0]["n"] if rows else 0), [(r["kind"], r["message_id"]) for r in rows]


# --- MariaDB ------------------------------------------------------------------------------


def _bool_all(ws: tuple[str, ...]) -> str:
    return " ".join(f"+{w}" for w in ws)


def _bool_phrase(ws: tuple[str, ...]) -> str:
    return '+"' + " ".join(ws) + '"'


class MariaFulltext:
    """(d) InnoDB FULLTEXT on folded and exact word strings; the account is a column filter."""

    name = "d"
    table = "sm_fulltext"

    def __init__(self, socket: str, load_dir: Path, timeout: float = 0) -> None:
        self.db = pymysql.connect(
            unix_socket=socket, user="root", database="bench", charset="utf8mb4", autocommit=True
        )
        self.load_dir = load_dir
        self.timeout = timeout

    def bulk(self, rows: Path, count: int) -> None:
        c = self.db.cursor()
        c.execute(f"DROP TABLE IF EXISTS {self.table}")
        c.execute(
            f"""CREATE TABLE {self.table} (
                FTS_DOC_ID bigint unsigned NOT NULL, account_id bigint NOT NULL,
                thread_id bigint NOT NULL, sent_at bigint NOT NULL,
                folded text NOT NULL, exact text NOT NULL,
                PRIMARY KEY (FTS_DOC_ID), UNIQUE KEY FTS_DOC_ID_INDEX (FTS_DOC_ID),
                KEY account_thread (account_id, thread_id)
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
        )
        load = self.load_dir / "fulltext.tsv"
        with load.open("w", encoding="utf-8") as out:
            for r in read_rows(rows):
                out.write(
                    f"{r.id}\t{r.account}\t{r.conversation}\t{r.sent_at}\t"
                    f"{' '.join(r.folded)}\t{' '.join(r.exact)}\n"
                )
        os.chmod(load, 0o644)
        t0 = time.perf_counter()
        c.execute(
            f"LOAD DATA INFILE %s INTO TABLE {self.table} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY '\\t' LINES TERMINATED BY '\\n'",
            (str(load),),
        )
        t1 = time.perf_counter()
        c.execute(
            f"ALTER TABLE {self.table} ADD FULLTEXT INDEX ft_folded (folded), "
            "ADD FULLTEXT INDEX ft_exact (exact)"
        )
        c.execute(f"ANALYZE TABLE {self.table}")
        t2 = time.perf_counter()
        self.timings = {"copy_s": t1 - t0, "index_s": t2 - t1}
        load.unlink()

    def live(self, rows: list[Row]) -> None:
        c = self.db.cursor()
        sql = f"INSERT INTO {self.table} VALUES (%s, %s, %s, %s, %s, %s)"
        self.db.autocommit(False)
        for lo in range(0, len(rows), LIVE_BATCH):
            chunk = rows[lo : lo + LIVE_BATCH]
            c.executemany(
                sql,
                [
                    (r.id, r.account, r.conversation, r.sent_at, " ".join(r.folded),
                     " ".join(r.exact))
                    for r in chunk
                ],
            )  # fmt: skip
            self.db.commit()
        self.db.autocommit(True)

    def size(self) -> int:
        c = self.db.cursor()
        c.execute("SELECT @@datadir")
        datadir = Path(str(c.fetchone()[0]))  # type: ignore[index]
        c.execute(
            "SELECT table_id FROM information_schema.innodb_sys_tables WHERE name = %s",
            (f"bench/{self.table}",),
        )
        table_id = int(c.fetchone()[0])  # type: ignore[index]
        # The table's own file and the full-text index's auxiliary tables (named by its id).
        prefix = f"fts_{table_id:016x}_"
        files = [
            p
            for p in (datadir / "bench").iterdir()
            if p.suffix == ".ibd" and (p.stem == self.table or p.name.lower().startswith(prefix))
        ]
        # Allocated size (an .ibd grows in extents); a freshly loaded table is close to its data.
        self.index_bytes = sum(p.stat().st_size for p in files if p.name.lower().startswith(prefix))
        return sum(p.stat().st_size for p in files)

    def search(self, q: Query, account: int, conversation: int | None) -> Result:
        thread = "AND thread_id = %s" if conversation is not None else ""
        args: list[Any] = [
            _bool_phrase(q.exact),
            _bool_all(q.exact),
            _bool_phrase(q.folded),
            _bool_all(tuple(dict.fromkeys(q.folded))),
            account,
        ]
        if conversation is not None:
            args.append(conversation)
        sql = f"""
            SELECT FTS_DOC_ID, kind, count(*) OVER () FROM (
              SELECT FTS_DOC_ID,
                CASE WHEN MATCH(exact) AGAINST(%s IN BOOLEAN MODE) THEN 1
                     WHEN MATCH(exact) AGAINST(%s IN BOOLEAN MODE) THEN 2
                     WHEN MATCH(folded) AGAINST(%s IN BOOLEAN MODE) THEN 3 ELSE 4 END AS kind
              FROM {self.table}
              WHERE MATCH(folded) AGAINST(%s IN BOOLEAN MODE) AND account_id = %s {thread}) m
            ORDER BY kind, FTS_DOC_ID DESC LIMIT {PAGE}"""
        c = self.db.cursor()
        if self.timeout:
            c.execute("SET SESSION max_statement_time = %s", (self.timeout,))
        try:
            c.execute(sql, args)
        except pymysql.err.OperationalError as e:
            if e.args[0] != 1969:  # ER_STATEMENT_TIMEOUT
                raise
            return TIMED_OUT
        except pymysql.err.InternalError as e:
            # 188: the query's full-text matches outgrew innodb_ft_result_cache_limit (at most
            # 4 GB): the engine cannot answer it at all.
            if e.args[0] != 188:
                raise
            return CACHE_LIMIT
        finally:
            if self.timeout:
                c.execute("SET SESSION max_statement_time = 0")
        rows = c.fetchall()
        return (int(rows[0][2]) if rows else 0), [(int(k), int(i)) for i, k, _ in rows]

    def close(self) -> None:
        self.db.close()


# --- tantivy ------------------------------------------------------------------------------


class Tantivy:
    """(e) tantivy in this process: one writer, the index in a local directory."""

    name = "e"

    def __init__(self, directory: Path) -> None:
        import tantivy  # type: ignore[import-not-found]  # optional: in its own venv

        self.t = tantivy
        self.dir = directory
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("account", indexed=True)
        sb.add_integer_field("conversation", indexed=True)
        sb.add_integer_field("mid", fast=True)
        sb.add_text_field("folded", tokenizer_name="whitespace", index_option="position")
        sb.add_text_field("exact", tokenizer_name="whitespace", index_option="position")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema, path=str(directory))

    def _doc(self, r: Row) -> Any:
        return self.t.Document(
            account=r.account,
            conversation=r.conversation,
            mid=r.id,
            folded=" ".join(r.folded),
            exact=" ".join(r.exact),
        )

    def bulk(self, rows: Path, count: int) -> None:
        docs = [self._doc(r) for r in read_rows(rows)]
        t0 = time.perf_counter()
        writer = self.index.writer(heap_size=1_000_000_000, num_threads=2)
        for d in docs:
            writer.add_document(d)
        t1 = time.perf_counter()
        writer.commit()
        writer.wait_merging_threads()
        t2 = time.perf_counter()
        self.timings = {"copy_s": t1 - t0, "index_s": t2 - t1}
        self.index.reload()

    def live(self, rows: list[Row]) -> None:
        writer = self.index.writer(heap_size=100_000_000, num_threads=1)
        for lo in range(0, len(rows), LIVE_BATCH):
            for r in rows[lo : lo + LIVE_BATCH]:
                writer.add_document(self._doc(r))
            writer.commit()
        writer.wait_merging_threads()
        self.index.reload()

    def size(self) -> int:
        self.index_bytes = sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file())
        return self.index_bytes

    def _words(self, field: str, ws: tuple[str, ...], phrase: bool) -> Any:
        t = self.t
        if len(ws) == 1:
            return t.Query.term_query(self.schema, field, ws[0])
        if phrase:
            return t.Query.phrase_query(self.schema, field, list(ws))
        return t.Query.boolean_query(
            [(t.Occur.Must, t.Query.term_query(self.schema, field, w)) for w in ws]
        )

    def search(self, q: Query, account: int, conversation: int | None) -> Result:
        t = self.t
        scope = [(t.Occur.Must, t.Query.term_query(self.schema, "account", account))]
        if conversation is not None:
            scope.append(
                (t.Occur.Must, t.Query.term_query(self.schema, "conversation", conversation))
            )
        ex_phrase = self._words("exact", q.exact, True)
        ex_all = self._words("exact", q.exact, False)
        fo_phrase = self._words("folded", q.folded, True)
        fo_all = self._words("folded", q.folded, False)
        must, must_not = t.Occur.Must, t.Occur.MustNot
        single = len(q.exact) == 1
        # The four kinds are disjoint: each is read newest first, in rank order.
        kinds = [
            (1, [(must, ex_phrase)]),
            (2, [(must, ex_all), (must_not, ex_phrase)]),
            (3, [(must, fo_phrase), (must_not, ex_all)]),
            (4, [(must, fo_all), (must_not, fo_phrase), (must_not, ex_all)]),
        ]
        searcher = self.index.searcher()
        total, page = 0, list[Hit]()
        for kind, clauses in kinds:
            if single and kind in (2, 4):
                continue
            got = searcher.search(
                t.Query.boolean_query(scope + clauses),
                limit=max(1, PAGE - len(page)),
                count=True,
                order_by_field="mid",
            )
            total += got.count
            if len(page) < PAGE:
                page.extend((kind, int(key)) for key, _ in got.hits[: PAGE - len(page)])
        return total, page

    def close(self) -> None:
        pass


# --- the run ------------------------------------------------------------------------------


def query_mix(rare: str) -> list[tuple[str, str]]:
    """The queries every tenant is asked: (name, text)."""
    return [
        ("common word", "giá"),
        ("rare word", rare),
        ("phrase, marks", "giao hàng"),
        ("phrase, no marks", "giao hang"),
        ("one-letter + word", "ở đâu"),
        ("false friend, folded", "duong"),
        ("false friend, exact", "đường"),
        ("in one conversation", "đơn hàng"),
    ]


def oracle(
    texts: dict[int, list[tuple[int, int, str]]], q: Query, account: int, conv: int | None
) -> Result:
    found: list[Hit] = []
    for mid, c, text in texts[account]:
        if conv is not None and c != conv:
            continue
        m = match(q, text)
        if m is not None:
            found.append((int(m.kind), mid))
    found.sort(key=lambda h: (h[0], -h[1]))
    return len(found), found[:PAGE]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--accounts", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--live", type=int, default=20_000, help="inserted after the bulk load")
    ap.add_argument("--candidates", default="a,b,c,d,e")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reps-by", default="", help="per candidate, e.g. d=1 for a slow one")
    ap.add_argument("--oracle-max", type=int, default=60_000, help="largest tenant checked")
    ap.add_argument("--pg-dsn", default="postgresql://bench@127.0.0.1:55433/bench")
    ap.add_argument("--mysql-socket", default="/tmp/search-bench/maria/mariadb.sock")  # noqa: S108
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/search-bench/load"))  # noqa: S108
    ap.add_argument("--tantivy-site", default="")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--reuse", action="store_true", help="query the tables an earlier run left")
    ap.add_argument("--flush-pending", action="store_true", help="GIN pending list, first")
    ap.add_argument("--tag", default="", help="suffix of the candidate's key in the results")
    ap.add_argument("--only", default="", help="query names of the mix to run, ';'-separated")
    ap.add_argument("--classes", default="small,medium,big", help="tenant classes to run")
    ap.add_argument("--mysql-timeout", type=float, default=0, help="max_statement_time, s")
    args = ap.parse_args()
    if args.tantivy_site:
        sys.path.append(args.tantivy_site)
    args.workdir.mkdir(parents=True, exist_ok=True)
    reps_by = dict(kv.split("=") for kv in args.reps_by.split(",") if kv)

    corpus = Corpus(args.messages, args.accounts, args.seed)
    sizes = corpus.account_sizes()
    # Tenants measured: the three biggest accounts, five of medium size, five small ones.
    classes = {
        "big": [1, 2, 3],
        "medium": list(range(30, 35)),
        "small": list(range(args.accounts // 2, args.accounts // 2 + 5)),
    }
    watched = {a for accs in classes.values() for a in accs}
    texts: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    last_conv: dict[int, int] = {}
    rows_path = args.workdir / f"corpus-{args.messages}.tsv"
    live_rows: list[Row] = []
    bulk_count = args.messages - args.live
    log(f"corpus: {args.messages:,} messages over {args.accounts:,} accounts -> {rows_path}")
    t0 = time.perf_counter()
    words_total = 0
    with rows_path.open("w", encoding="utf-8") as out:
        for m in corpus.generate():
            if m.id % 501 == 0:
                check(m)
            words_total += len(m.exact)
            row = Row(m.id, m.account, m.conversation, m.sent_at, m.exact, m.folded)
            if m.id > bulk_count:
                live_rows.append(row)
            else:
                out.write(
                    f"{m.id}\t{m.account}\t{m.conversation}\t{m.sent_at}\t"
                    f"{' '.join(m.exact)}\t{' '.join(m.folded)}\n"
                )
            if m.account in watched:
                texts[m.account].append((m.id, m.conversation, m.text))
                last_conv[m.account] = m.conversation
    log(f"corpus written in {time.perf_counter() - t0:.0f}s, {words_total:,} words")

    rare = vocabulary(corpus.vocab_size, random.Random(args.seed))[1500]
    mix = query_mix(rare)
    probes = [
        Probe(
            name,
            text,
            a,
            last_conv[a] if name == "in one conversation" else None,
            cls,
        )
        for cls, accs in classes.items()
        if cls in args.classes.split(",")
        for a in accs
        for name, text in mix
        if not args.only or name in args.only.split(";")
    ]
    # The oracle reads every message of a tenant in Python: for the biggest tenants of a big
    # corpus it would take longer than the engines, so those are checked against the first
    # candidate measured instead (whose other result sets the oracle checked).
    checked_by_oracle = {a for a in watched if sizes[a - 1] <= args.oracle_max}
    log(f"oracle (search_text.match()) over accounts {sorted(checked_by_oracle)}")
    expected: dict[Probe, Result | None] = {
        p: oracle(texts, Query.parse(p.text), p.account, p.conversation)
        if p.account in checked_by_oracle
        else None
        for p in probes
    }
    reference: dict[Probe, str] = {p: "oracle" for p in probes if expected[p] is not None}

    results: dict[str, Any] = {}
    if args.json.exists():
        results = json.loads(args.json.read_text())
    results["_run"] = {
        "messages": args.messages,
        "accounts": args.accounts,
        "seed": args.seed,
        "live": args.live,
        "words": words_total,
        "rare_word": rare,
        "classes": {c: {str(a): sizes[a - 1] for a in accs} for c, accs in classes.items()},
        "argv": sys.argv[1:],
    }
    loop = asyncio.new_event_loop()
    for cand in args.candidates.split(","):
        engine: Engine
        if cand == "a":
            engine = PgPrefixed(args.pg_dsn, loop)
        elif cand == "b":
            engine = PgComposite(args.pg_dsn, loop)
        elif cand == "c":
            engine = PgTrigram(args.pg_dsn, loop)
        elif cand == "d":
            engine = MariaFulltext(args.mysql_socket, args.workdir, args.mysql_timeout)
        elif cand == "e":
            try:
                engine = Tantivy(args.workdir / "tantivy")
            except ImportError as e:
                log(f"e: tantivy not importable ({e}); skipped")
                continue
        else:
            raise SystemExit(f"unknown candidate {cand}")
        key = cand + args.tag
        if args.reuse:
            # Measure what an earlier run loaded (another way of querying it, or after a flush).
            earlier = results[cand]
            bulk_s, live_s, timings = earlier["bulk_s"], earlier["live_s"], {}
            timings = {k: earlier[k] for k in ("copy_s", "index_s")}
        else:
            log(f"{cand}: bulk load of {bulk_count:,} messages")
            t0 = time.perf_counter()
            engine.bulk(rows_path, bulk_count)
            bulk_s = time.perf_counter() - t0
            timings = getattr(engine, "timings", {})
            log(f"{cand}: bulk {bulk_s:.0f}s {timings}; live inserts of {len(live_rows):,}")
            t0 = time.perf_counter()
            engine.live(live_rows)
            live_s = time.perf_counter() - t0
        flush_s = None
        if args.flush_pending and isinstance(engine, _Pg):
            # The live inserts sit in the GIN pending list (fastupdate) until a vacuum or the
            # list's size limit moves them into the tree; every query reads the whole list.
            t0 = time.perf_counter()
            engine.flush_pending()
            flush_s = time.perf_counter() - t0
        size = engine.size()
        log(f"{cand}: live {live_s:.1f}s; size {size / 1e6:.0f} MB")
        reps = int(reps_by.get(cand, args.reps))
        # Warm once (the check below), then measure.
        lat: dict[str, list[float]] = defaultdict(list)
        wrong: list[str] = []
        timeouts: list[str] = []
        for p in probes:
            q = Query.parse(p.text)
            got = engine.search(q, p.account, p.conversation)
            want = expected[p]
            if got in (TIMED_OUT, CACHE_LIMIT):
                why = "timed out" if got == TIMED_OUT else "failed: FTS result cache limit"
                timeouts.append(f"{why}: {p.name} '{p.text}' account {p.account}")
            elif want is None:
                expected[p], reference[p] = got, cand
            elif got != want:
                wrong.append(
                    f"{p.name} '{p.text}' account {p.account}: count {got[0]} "
                    f"(expected {want[0]} from {reference[p]}), page "
                    f"{'same' if got[1] == want[1] else 'differs'}"
                )
            if got in (TIMED_OUT, CACHE_LIMIT):
                # A search cut short is recorded at its limit, and not repeated.
                lat[f"{p.tenant_class}|{p.name}"].append(args.mysql_timeout * 1000)
                continue
            for _ in range(reps):
                t = time.perf_counter()
                engine.search(q, p.account, p.conversation)
                lat[f"{p.tenant_class}|{p.name}"].append((time.perf_counter() - t) * 1000)
        results[key] = {
            "pending_flush_s": flush_s,
            "bulk_s": bulk_s,
            **timings,
            # Load and index build only: making each engine's input from the corpus is not counted.
            "bulk_docs_per_s": bulk_count / sum(timings.values()),
            "live_s": live_s,
            "live_docs_per_s": len(live_rows) / live_s,
            "size_bytes": size,
            "index_bytes": getattr(engine, "index_bytes", None),
            "bytes_per_message": size / args.messages,
            "latency_ms": {
                k: {"p50": statistics.median(v), "p99": pct(v, 99), "n": len(v)}
                for k, v in lat.items()
            },
            "matches": {
                f"{p.tenant_class}|{p.name}|{p.account}": found[0]
                for p in probes
                if (found := expected[p]) is not None
            },
            "checked": len(probes),
            "checked_against": dict(Counter(reference[p] for p in probes)),
            "reps": reps,
            "wrong": wrong,
            "timeouts": timeouts,
        }
        log(f"{cand}: {len(wrong)} of {len(probes)} result sets differ from the oracle")
        for w in wrong[:10]:
            log(f"  {w}")
        engine.close()
        args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    report(results, mix)


def report(results: dict[str, Any], mix: list[tuple[str, str]]) -> None:
    run = results["_run"]
    cands = [c for c in results if c != "_run" and "checked" in results[c]]
    print(f"messages {run['messages']:,}, accounts {run['accounts']:,}, seed {run['seed']}")
    print("\n| | " + " | ".join(cands) + " |\n|---|" + "---|" * len(cands))
    for key, fmt in (
        ("bulk_docs_per_s", "{:,.0f}"),
        ("pending_flush_s", "{:.1f}"),
        ("copy_s", "{:.0f}"),
        ("index_s", "{:.0f}"),
        ("live_docs_per_s", "{:,.0f}"),
        ("size_bytes", "{:,.0f}"),
        ("index_bytes", "{:,.0f}"),
        ("bytes_per_message", "{:.0f}"),
    ):
        vals = [results[c].get(key) for c in cands]
        print(f"| {key} | " + " | ".join("-" if v is None else fmt.format(v) for v in vals) + " |")
    print(
        "| result sets = oracle | "
        + " | ".join(f"{results[c]['checked'] - len(results[c]['wrong'])}/{results[c]['checked']}"
                     for c in cands)
        + " |"
    )  # fmt: skip
    print("\nLatency, first page of 20 with the count, ms p50 / p99:\n")
    print("| tenant | query | " + " | ".join(cands) + " |\n|---|---|" + "---|" * len(cands))
    for cls in ("small", "medium", "big"):
        for name, text in mix:
            key = f"{cls}|{name}"
            cells = []
            for c in cands:
                v = results[c]["latency_ms"].get(key)
                cells.append("-" if v is None else f"{v['p50']:.1f} / {v['p99']:.1f}")
            print(f"| {cls} | {name} `{text}` | " + " | ".join(cells) + " |")
    for c in cands:
        for w in results[c]["wrong"]:
            print(f"- {c}: {w}")
        for w in results[c].get("timeouts", []):
            print(f"- {c}: {w}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["report"]:
        # Print the report of a results file again: python -m bench.search_engines report FILE
        saved = json.loads(Path(sys.argv[2]).read_text())
        report(saved, query_mix(saved["_run"]["rare_word"]))
    else:
        main()
