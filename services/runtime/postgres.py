"""PostgreSQL pools (asyncpg; spans come from opentelemetry-instrumentation-asyncpg)."""

from __future__ import annotations

import asyncpg

from services.runtime import errors, metrics


async def _reset(conn: asyncpg.Connection) -> None:
    # The services never change session state (no SET, LISTEN, open cursors or session advisory
    # locks: ingest's transaction-scoped ones end with their transaction), so asyncpg's default
    # reset query would only add a round trip — and a transaction — to every release. An
    # unfinished transaction is still rolled back.
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def connect(
    url: str,
    *,
    min_size: int = 0,
    max_size: int = 10,
    name: str,
    timeout: float = 10.0,  # noqa: ASYNC109 (the pool's deadline for every call, not this one's)
    statement_cache_size: int = 100,
) -> asyncpg.Pool:
    """A pool to `url` (postgresql://user:password@host:port/db), sessions in UTC.

    Connections open on first use (a service starts while PostgreSQL is down); every statement
    has a deadline (command_timeout) and so does opening a connection.
    """
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        command_timeout=timeout,
        timeout=min(timeout, 5.0),
        reset=_reset,
        statement_cache_size=statement_cache_size,
        # client_encoding spelled as the server reports it: asyncpg's own 'utf-8' differs from
        # the server's UTF8 as a string, so PgBouncer (transaction pooling) re-sent a SET on
        # every transaction; the same encoding under the server's name costs nothing.
        server_settings={"application_name": name, "timezone": "UTC", "client_encoding": "UTF8"},
    )
    if pool is None:  # only when create_pool is not awaited
        raise RuntimeError("asyncpg.create_pool returned no pool")
    metrics.watch_pool(f"postgres:{name}", pool.get_size, pool.get_idle_size, max_size)
    return pool


async def ping(pool: asyncpg.Pool) -> None:
    """One round trip (for readiness)."""
    await pool.fetchval("SELECT 1")


# SQLSTATEs after which the same statement may succeed later: serialization failure, deadlock,
# the connection/shutdown classes, too many connections, and a write reaching a primary that was
# demoted (25006, read-only transaction): during a failover the next connection reaches the
# standby Patroni promoted.
TRANSIENT_SQLSTATES = frozenset(
    {"40001", "40P01", "57P01", "57P02", "57P03", "57014", "53300", "55P03", "25006"}
)


def classify(exc: BaseException) -> errors.ErrorKind | None:
    """How a PostgreSQL failure should be handled (None: not a PostgreSQL error)."""
    # InternalClientError: a connection whose server went away mid-statement (PgBouncer answers
    # with an error, then the link dies) is left half-way through its protocol, and the next
    # statement on it is refused before anything is sent ("cannot switch to state 11"). Seen in
    # a PostgreSQL failover; the connection is closed moments later and a retry gets a new one.
    if isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError)):
        return errors.ErrorKind.TRANSIENT
    if not isinstance(exc, asyncpg.PostgresError):
        return None
    state = getattr(exc, "sqlstate", "") or ""
    if state in TRANSIENT_SQLSTATES or state.startswith("08"):
        return errors.ErrorKind.TRANSIENT
    # Class 22 (data exception) and 23 (integrity constraint violation) are about the values.
    if state.startswith(("22", "23")):
        return errors.ErrorKind.DATA
    return errors.ErrorKind.OTHER


errors.register(classify)
