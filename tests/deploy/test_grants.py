"""Least privilege in the databases: each service's user does what its role needs and is refused
the rest (the grants: deploy/local/stack.sh for MariaDB's, migrations/grants/ for the tables').

A compromised reader cannot write, a writer cannot change what it does not own, and no service
can change the schema: DDL is the migrator's alone."""

from __future__ import annotations

import asyncpg
import pymysql
import pytest

from services.runtime.mysql import MysqlDatabase
from tests.stack import Env

pytestmark = pytest.mark.asyncio

# MariaDB's "command denied" (1142), "column command denied" (1143), "access denied to database"
# (1044): what a statement outside the user's grants gets.
MYSQL_DENIED = {1142, 1143, 1044}

# (user's URL in Env, statement): refused for that user.
MYSQL_REFUSED = [
    ("mysql_timeline_url", "INSERT INTO zalo_accounts (id, display_name) VALUES (424242, 'x')"),
    ("mysql_timeline_url", "DELETE FROM zalo_messages WHERE id = 0"),
    ("mysql_timeline_url", "UPDATE zalo_conversations SET last_read_at = NULL WHERE id = 0"),
    # ingest reads what a reply refers to (docs/outbound.md) but writes only its orders and leases.
    ("mysql_ingest_url", "UPDATE zalo_messages SET content = NULL WHERE id = 0"),
    ("mysql_ingest_url", "DELETE FROM zalo_outbound_messages WHERE id = 0"),
    ("mysql_ingest_url", "INSERT INTO zalo_accounts (id, display_name) VALUES (424242, 'x')"),
    # A conversation's assignee and status are ingest's to change (docs/assignment.md); the
    # rest of the row is the flusher's.
    ("mysql_ingest_url", "UPDATE zalo_conversations SET last_message_at = NOW() WHERE id = 0"),
    ("mysql_ingest_url", "DELETE FROM zalo_conversations WHERE id = 0"),
    ("mysql_flusher_url", "CREATE TABLE intruder (id INT PRIMARY KEY)"),
    ("mysql_flusher_url", "DROP TABLE zalo_messages"),
    ("mysql_flusher_url", "ALTER TABLE zalo_messages ADD COLUMN intruder INT"),
]

MYSQL_ALLOWED = [
    ("mysql_timeline_url", "SELECT COUNT(*) FROM zalo_messages"),
    ("mysql_ingest_url", "SELECT COUNT(*) FROM zalo_accounts"),
    ("mysql_ingest_url", "SELECT COUNT(*) FROM zalo_messages"),
    ("mysql_ingest_url", "UPDATE zalo_outbound_messages SET attempts = 0 WHERE id = 0"),
    (
        "mysql_ingest_url",
        "UPDATE zalo_conversations SET assignee_user_id = NULL, status = 'open',"
        " snoozed_until = NULL WHERE id = 0",
    ),
    ("mysql_flusher_url", "DELETE FROM zalo_messages WHERE id = 0"),
]

PG_REFUSED = [
    ("pg_timeline_url", "INSERT INTO courses (id, title) VALUES (424242, 'x')"),
    ("pg_timeline_url", "DELETE FROM post_likes WHERE post_id = 0"),
    ("pg_likes_url", "INSERT INTO post_likes (post_id, user_id) VALUES (0, 0)"),
    ("pg_likes_url", "UPDATE posts SET like_count = 0 WHERE id = 0"),
    ("pg_ingest_url", "DELETE FROM posts WHERE id = 0"),
    ("pg_ingest_url", "INSERT INTO post_likes (post_id, user_id) VALUES (0, 0)"),
    ("pg_flusher_url", "UPDATE posts SET title = 'x' WHERE id = 0"),
    ("pg_flusher_url", "DELETE FROM posts WHERE id = 0"),
    ("pg_likes_writer_url", "UPDATE posts SET body = 'x' WHERE id = 0"),
    ("pg_likes_writer_url", "DELETE FROM courses WHERE id = 0"),
    ("pg_flusher_url", "CREATE TABLE intruder (id int PRIMARY KEY)"),
    ("pg_ingest_url", "DROP TABLE posts"),
    # The search index: the indexer (flusher) writes it, timeline only reads it.
    ("pg_timeline_url", "DELETE FROM search_messages WHERE zalo_account_id = 0"),
    ("pg_ingest_url", "SELECT count(*) FROM search_forum"),
    ("pg_likes_url", "SELECT count(*) FROM search_positions"),
]

PG_ALLOWED = [
    ("pg_timeline_url", "SELECT count(*) FROM posts"),
    ("pg_likes_url", "SELECT count(*) FROM post_likes"),
    ("pg_ingest_url", "UPDATE posts SET title = title WHERE id = 0"),
    ("pg_flusher_url", "UPDATE posts SET like_count = like_count WHERE id = 0"),
    ("pg_likes_writer_url", "DELETE FROM post_likes WHERE post_id = 0"),
    ("pg_flusher_url", "DELETE FROM search_messages WHERE zalo_account_id = 0"),
    ("pg_timeline_url", "SELECT count(*) FROM search_forum"),
]


def _ids(cases: list[tuple[str, str]]) -> list[str]:
    return [f"{url.removesuffix('_url')}: {sql.split(' WHERE')[0]}" for url, sql in cases]


async def _run_as(env: Env, url: str, sql: str) -> None:
    """Runs `sql` as the user whose URL `url` names (MariaDB's or PostgreSQL's)."""
    connect = MysqlDatabase.connect if url.startswith("mysql_") else asyncpg.connect
    db = await connect(getattr(env, url))
    try:
        await db.execute(sql)
    finally:
        await db.close()


@pytest.mark.parametrize(("url", "sql"), MYSQL_REFUSED, ids=_ids(MYSQL_REFUSED))
async def test_a_mariadb_user_is_refused_what_its_role_does_not_need(
    env: Env, url: str, sql: str
) -> None:
    with pytest.raises(pymysql.err.MySQLError) as refused:
        await _run_as(env, url, sql)
    assert refused.value.args[0] in MYSQL_DENIED, refused.value


@pytest.mark.parametrize(("url", "sql"), MYSQL_ALLOWED, ids=_ids(MYSQL_ALLOWED))
async def test_a_mariadb_user_may_do_what_its_role_needs(env: Env, url: str, sql: str) -> None:
    await _run_as(env, url, sql)


@pytest.mark.parametrize(("url", "sql"), PG_REFUSED, ids=_ids(PG_REFUSED))
async def test_a_postgres_user_is_refused_what_its_role_does_not_need(
    env: Env, url: str, sql: str
) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await _run_as(env, url, sql)


@pytest.mark.parametrize(("url", "sql"), PG_ALLOWED, ids=_ids(PG_ALLOWED))
async def test_a_postgres_user_may_do_what_its_role_needs(env: Env, url: str, sql: str) -> None:
    await _run_as(env, url, sql)
