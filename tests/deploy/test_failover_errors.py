"""What a client sees while a database fails over is transient: the work is retried (a stream
shard waits, an RPC answers UNAVAILABLE) and reaches the node that took over, instead of being
taken for a bug or for bad data."""

from __future__ import annotations

import aiomysql
import asyncpg
import pytest

from services.runtime import errors
from services.runtime.errors import ErrorKind
from tests.stack import Env


@pytest.mark.asyncio
async def test_a_write_to_a_demoted_postgres_primary_is_transient(env: Env) -> None:
    # A primary Patroni demoted refuses writes as a read-only transaction does: the real error.
    # The transaction, not the session, is read-only: PgBouncer hands the server connection to
    # other clients afterwards.
    conn = await asyncpg.connect(env.pg_ingest_url)
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError) as refused:
            async with conn.transaction(readonly=True):
                await conn.execute("UPDATE posts SET title = title WHERE id = 0")
    finally:
        await conn.close()
    assert errors.classify(refused.value) is ErrorKind.TRANSIENT


def test_a_connection_left_half_way_by_a_dying_server_is_transient() -> None:
    # What asyncpg raised to a forum write in a PostgreSQL leader kill: the statement was refused
    # by the client before it was sent, so a retry on a fresh connection is safe.
    refused = asyncpg.InternalClientError(
        "cannot switch to state 11; another operation (2) is in progress"
    )
    assert errors.classify(refused) is ErrorKind.TRANSIENT


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (1047, "WSREP has not yet prepared node for application use"),
        (1213, "Deadlock found when trying to get lock; try restarting transaction"),
        (1290, "The MariaDB server is running with the --read-only option"),
    ],
)
def test_a_galera_node_outside_the_primary_component_is_transient(code: int, message: str) -> None:
    assert errors.classify(aiomysql.OperationalError(code, message)) is ErrorKind.TRANSIENT


def test_a_bad_value_stays_data_on_either_engine() -> None:
    # The failover codes must not swallow what retrying can never fix.
    assert errors.classify(aiomysql.IntegrityError(1062, "Duplicate entry")) is ErrorKind.DATA
    assert errors.classify(asyncpg.UniqueViolationError("duplicate key")) is ErrorKind.DATA
