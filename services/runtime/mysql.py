"""aiomysql with OpenTelemetry client spans.

No instrumentor exists for aiomysql, so this thin wrapper is the one place that talks to MySQL /
MariaDB. Every statement becomes a CLIENT span following the database semantic conventions
(db.system.name, db.namespace, db.operation.name, db.collection.name, db.query.text with
placeholders only, server.address/port, db.operation.batch.size). Values are never recorded.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import aiomysql
from aiomysql.cursors import RE_INSERT_VALUES
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions, convert_datetime

from services.runtime import errors, metrics

Row = tuple[Any, ...]

# The longest multi-row statement insert_returning sends, as aiomysql's executemany (its
# max_stmt_length), well under the server's max_allowed_packet.
_STATEMENT_BYTES = 1_024_000

_tracer = trace.get_tracer(__name__)
_STATEMENT = re.compile(
    r"^\s*(?P<op>\w+)\b.*?\b(?:FROM|INTO|UPDATE|TABLE)\s+`?(?P<table>\w+)`?",
    re.IGNORECASE | re.DOTALL,
)


@lru_cache(maxsize=512)
def _describe(sql: str) -> tuple[str, str | None]:
    match = _STATEMENT.match(sql)
    if match is None:
        return sql.split(None, 1)[0].upper() if sql.strip() else "SQL", None
    return match["op"].upper(), match["table"]


def _parse_datetime(text: str) -> datetime | str:
    # datetime.fromisoformat is C code, several times faster than PyMySQL's regex parser, and
    # every timeline row carries three datetimes. Zero dates and the like fall back to PyMySQL.
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return convert_datetime(text)


_CONVERSIONS = {
    **conversions,
    FIELD_TYPE.DATETIME: _parse_datetime,
    FIELD_TYPE.TIMESTAMP: _parse_datetime,
}


_SSL_MODES = ("DISABLED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")


@dataclass(frozen=True)
class MysqlTarget:
    """Where and as whom to connect, parsed from a mysql://user:pass@host:port/db URL.

    TLS, as MySQL's clients spell it: `?ssl_ca=/path/ca.pem` verifies the server's certificate
    and name (VERIFY_IDENTITY, what a managed MySQL needs: 8.4's caching_sha2_password sends the
    password only over TLS); `ssl_mode=VERIFY_CA` skips the name, `REQUIRED` encrypts against the
    system's trust store without checking the name, `DISABLED` (the default without ssl_ca)
    speaks plaintext."""

    host: str
    port: int
    user: str
    password: str
    database: str
    ssl_mode: str = "DISABLED"
    ssl_ca: str | None = None

    @classmethod
    def from_url(cls, url: str) -> MysqlTarget:
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mariadb") or not parts.path.strip("/"):
            raise ValueError("expected mysql://user:password@host:port/database")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - {"ssl_ca", "ssl_mode"})
        if unknown:
            raise ValueError(
                f"unknown MySQL URL parameter(s) {', '.join(unknown)}: expected ssl_ca and ssl_mode"
            )
        ssl_ca = query.get("ssl_ca") or None
        mode = query.get("ssl_mode", "VERIFY_IDENTITY" if ssl_ca else "DISABLED").upper()
        if mode not in _SSL_MODES:
            raise ValueError(f"ssl_mode {mode!r}: expected one of {', '.join(_SSL_MODES)}")
        if mode in ("VERIFY_CA", "VERIFY_IDENTITY") and not ssl_ca:
            raise ValueError(f"ssl_mode={mode} needs ssl_ca (the CA file to verify against)")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=parts.path.strip("/"),
            ssl_mode=mode,
            ssl_ca=ssl_ca,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context the URL asks for (None: plaintext)."""
        if self.ssl_mode == "DISABLED":
            return None
        context = ssl.create_default_context(cafile=self.ssl_ca)
        if self.ssl_mode != "VERIFY_IDENTITY":
            context.check_hostname = False
        if self.ssl_mode == "REQUIRED":
            context.verify_mode = ssl.CERT_NONE
        return context


class Connection:
    """One pooled connection; every statement on it is traced and has a deadline."""

    def __init__(self, conn: aiomysql.Connection, db: MysqlDatabase) -> None:
        self._conn = conn
        self._db = db

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; returns the affected (or matched) row count."""
        async with (
            self._span(sql, None),
            deadline(self._conn, self._db.timeout),
            self._conn.cursor() as cur,
        ):
            return int(await cur.execute(sql, args))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """One multi-row statement for `INSERT … VALUES (%s, …)` (every item a placeholder)."""
        if not rows:
            return 0
        async with (
            self._span(sql, len(rows)),
            deadline(self._conn, self._db.timeout),
            self._conn.cursor() as cur,
        ):
            return int(await cur.executemany(sql, rows))

    async def insert_returning(self, sql: str, rows: Sequence[Sequence[Any]]) -> list[Row]:
        """`INSERT … VALUES (%s, …) [ON DUPLICATE KEY UPDATE …] RETURNING …` for every row:
        multi-row statements of at most _STATEMENT_BYTES each, and every row each returns (a
        duplicate's as the update left it). aiomysql's executemany splits a batch the same way
        but keeps only its last statement's result."""
        if not rows:
            return []
        shape = RE_INSERT_VALUES.match(sql)
        if shape is None:
            raise ValueError("insert_returning takes INSERT … VALUES (%s, …) … RETURNING …")
        prefix = (shape[1] % ()).encode()
        values, postfix = shape[2].rstrip(), (shape[3] or "").encode()
        returned: list[Row] = []
        async with (
            self._span(sql, len(rows)) as span,
            deadline(self._conn, self._db.timeout),
            self._conn.cursor() as cur,
        ):
            escape = self._conn.escape
            statement = bytearray()
            for row in rows:
                item = (values % tuple(escape(value) for value in row)).encode()
                if statement and len(statement) + len(item) + len(postfix) > _STATEMENT_BYTES:
                    await cur.execute(bytes(statement + postfix))
                    returned += await cur.fetchall()
                    statement = bytearray()
                statement += b"," + item if statement else prefix + item
            await cur.execute(bytes(statement + postfix))
            returned += await cur.fetchall()
            span.set_attribute("db.response.returned_rows", len(returned))
        return returned

    async def fetchall(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        async with (
            self._span(sql, None) as span,
            deadline(self._conn, self._db.timeout),
            self._conn.cursor() as cur,
        ):
            await cur.execute(sql, args)
            rows: list[Row] = list(await cur.fetchall())
            span.set_attribute("db.response.returned_rows", len(rows))
            return rows

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetchall(sql, args)
        return rows[0] if rows else None

    @asynccontextmanager
    async def _span(self, sql: str, batch: int | None) -> AsyncIterator[trace.Span]:
        op, table = _describe(sql)
        target = self._db.target
        name = f"{op} {target.database}.{table}" if table else f"{op} {target.database}"
        attributes: dict[str, str | int] = {
            "db.system.name": self._db.system,
            "db.namespace": target.database,
            "db.operation.name": op,
            "db.query.text": sql,
            "server.address": target.host,
            "server.port": target.port,
        }
        if table:
            attributes["db.collection.name"] = table
        if batch is not None:
            attributes["db.operation.batch.size"] = batch
        with _tracer.start_as_current_span(
            name, kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
        ) as span:
            try:
                yield span
            except aiomysql.Error as exc:
                code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
                span.set_attribute("error.type", type(exc).__name__)
                if code is not None:
                    span.set_attribute("db.response.status_code", str(code))
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                raise


@asynccontextmanager
async def deadline(conn: aiomysql.Connection, seconds: float) -> AsyncIterator[None]:
    """Give up on a call after `seconds`, closing the connection: after a timeout nobody knows
    what state it is in (a half-open socket, a statement still running), so it is never reused."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        conn.close()
        raise


class MysqlDatabase:
    """A connection pool; reads run in autocommit, writes in explicit transactions."""

    def __init__(
        self, pool: aiomysql.Pool, target: MysqlTarget, system: str, timeout: float
    ) -> None:
        self._pool = pool
        self.target = target
        self.system = system
        self.timeout = timeout

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        minsize: int = 0,
        maxsize: int = 10,
        system: str = "mariadb",
        timeout: float = 10.0,  # noqa: ASYNC109 (the pool's deadline for every call, not this one's)
    ) -> MysqlDatabase:
        """A pool to `url`; connections open on first use, so a service starts while MySQL is
        down. Sessions run in UTC so DATETIME and TIMESTAMP agree."""
        target = MysqlTarget.from_url(url)
        pool = await aiomysql.create_pool(
            minsize=minsize,
            maxsize=maxsize,
            host=target.host,
            port=target.port,
            user=target.user,
            password=target.password,
            db=target.database,
            charset="utf8mb4",
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
            pool_recycle=3600,
            connect_timeout=min(timeout, 5),
            conv=_CONVERSIONS,
            ssl=target.ssl_context(),
        )
        metrics.watch_pool(
            f"mysql:{target.user}", lambda: pool.size, lambda: pool.freesize, maxsize
        )
        return cls(pool, target, system, timeout)

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[aiomysql.Connection]:
        # Taking a connection may mean opening one, or waiting for a busy pool: both bounded.
        async with asyncio.timeout(self.timeout):
            conn = await self._pool.acquire()
        try:
            yield conn
        except aiomysql.Error as exc:
            # Refused for who we are or what the schema is (a revoked grant, a missing table):
            # a connection keeps the database-level privileges it started with, so only a new
            # one sees the grant once it is restored.
            if classify(exc) is errors.ErrorKind.OTHER:
                conn.close()
            raise
        finally:
            await self._pool.release(conn)

    async def ping(self) -> None:
        """One round trip (for readiness)."""
        await self.fetchone("SELECT 1")

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        async with self._acquire() as conn:
            yield Connection(conn, self)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """BEGIN … COMMIT, or ROLLBACK when the block raises."""
        async with self._acquire() as conn:
            async with deadline(conn, self.timeout):
                await conn.begin()
            try:
                yield Connection(conn, self)
            except BaseException:
                await _rollback_quietly(conn, self.timeout)
                raise
            async with deadline(conn, self.timeout):
                await conn.commit()

    async def fetchall(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        async with self.connection() as conn:
            return await conn.fetchall(sql, args)

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        async with self.connection() as conn:
            return await conn.fetchone(sql, args)

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        async with self.connection() as conn:
            return await conn.execute(sql, args)

    async def close(self) -> None:
        self._pool.close()
        await self._pool.wait_closed()


async def _rollback_quietly(conn: aiomysql.Connection, seconds: float) -> None:
    # The original error matters more than a failed rollback on a broken connection; a broken
    # connection is closed so the pool does not hand it out again.
    if conn.closed:
        return
    try:
        async with asyncio.timeout(seconds):
            await conn.rollback()
    except Exception:
        conn.close()


# MySQL error numbers after which the same statement may succeed later: lost or refused
# connections, server shutdown, lock waits and deadlocks (a Galera certification conflict is one
# too), a read-only server (1290, 1836) and a Galera node outside the primary component (1047):
# during a failover the next connection reaches the node that took over.
TRANSIENT_ERRORS = frozenset(
    {1040, 1047, 1053, 1205, 1213, 1927, 2002, 2003, 2006, 2013, 2014, 2055, 1290, 1836}
)
# Errors about the values themselves: duplicates, NULLs, out of range, truncation, bad dates,
# strings or JSON, CHECK and foreign-key constraints. The same row fails the same way forever.
DATA_ERRORS = frozenset(
    {1048, 1062, 1264, 1265, 1292, 1366, 1367, 1406, 1411, 1451, 1452, 1690, 3140, 3819, 4025}
)


def classify(exc: BaseException) -> errors.ErrorKind | None:
    """How a MySQL/MariaDB failure should be handled (None: not a MySQL error)."""
    if isinstance(exc, aiomysql.InterfaceError):
        return errors.ErrorKind.TRANSIENT
    if not isinstance(exc, aiomysql.Error):
        return None
    code = exc.args[0] if exc.args else None
    if not isinstance(code, int):
        # aiomysql raises OperationalError without a server code when the socket breaks.
        return errors.ErrorKind.TRANSIENT if isinstance(exc, aiomysql.OperationalError) else None
    if code in TRANSIENT_ERRORS:
        return errors.ErrorKind.TRANSIENT
    if code in DATA_ERRORS or isinstance(exc, (aiomysql.IntegrityError, aiomysql.DataError)):
        return errors.ErrorKind.DATA
    return errors.ErrorKind.OTHER


errors.register(classify)


def placeholders(values: Iterable[object]) -> str:
    """'%s, %s, …' for an IN list of len(values)."""
    return ", ".join("%s" for _ in values)
