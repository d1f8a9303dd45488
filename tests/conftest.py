"""Fixtures: real MariaDB and Redis (started by `make test`), in-process services on port 0.

Every test gets empty tables and an empty Redis database. The services run in this process, built
by the same `build(settings)` their `main()` serves, so one InMemorySpanExporter sees every span.
They serve mTLS with the local CA's certificates (var/tls) and check forwarded user tokens as in
production; the stubs call as the gateway does, for the user each request names. The settings
and the serving they use are tests/stack.py's, for the tests that start a service of their own.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
import pytest_asyncio
import redis.asyncio as redis
from agora.forum.v1 import (
    forum_read_service_pb2_grpc,
    forum_write_service_pb2_grpc,
    like_service_pb2_grpc,
)
from agora.messaging.v1 import ingest_service_pb2_grpc, timeline_service_pb2_grpc
from agora.search.v1 import search_service_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.flusher.config import FlusherSettings
from services.ingest import server as ingest_service
from services.ingest.config import IngestSettings
from services.runtime import postgres, telemetry
from services.runtime import redis_client as redis_client_module
from services.runtime.grpc_server import GrpcServer
from services.runtime.mysql import MysqlDatabase
from services.search.indexer import Indexer, IndexerSettings
from services.search.repository import ForumSource, MessageSource, SearchIndex
from services.streams.live import LiveFeeds
from services.streams.messages import MessageStreams, MessageStreamSettings
from tests.helpers import (
    ACCOUNTS,
    SHARDS,
    Downstream,
    Flusher,
    gateway_stub,
    mint_token,
)
from tests.stack import (
    ON_CLUSTER,
    Env,
    gateway_settings,
    ingest_settings_for,
    likes_server_fixture,
    serving,
    serving_gateway,
    serving_timeline,
)
from tools.forum_data import load_lab

TABLES = [
    "zalo_canned_replies",
    "zalo_account_audit",
    "zalo_account_agents",
    "zalo_outbound_messages",
    "zalo_listener_leases",
    "zalo_message_receipts",
    "zalo_message_reactions",
    "zalo_agent_sent_messages",
    "zalo_messages",
    "zalo_messages_archive",
    "zalo_conversations",
    "zalo_accounts",
    "capacity_snapshots",
    "stream_fences",
]
PG_TABLES = ", ".join(
    [
        "moderation_actions",
        "post_revisions",
        "comment_revisions",
        "comment_likes",
        "post_likes",
        "comments",
        "posts",
        "course_members",
        "courses",
        "stream_fences",
        "live_outbox",
        "idempotency_keys",
        "people",
        "search_messages",
        "search_forum",
        "search_positions",
    ]
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "single_redis: starts or breaks a single Redis of its own (not run on the cluster pass)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the cluster pass, leave out the tests that are about a single Redis process; they ran
    on the first pass."""
    if not ON_CLUSTER:
        return
    kept = [i for i in items if i.get_closest_marker("single_redis") is None]
    deselected = [i for i in items if i.get_closest_marker("single_redis") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run the tests with `make test`", returncode=2)
    return value


@pytest.fixture(scope="session")
def env() -> Env:
    return Env(
        redis_url=_env("TEST_REDIS_URL"),
        redis_ingest_url=_env("TEST_REDIS_INGEST_URL"),
        redis_likes_url=_env("TEST_REDIS_LIKES_URL"),
        redis_flusher_url=_env("TEST_REDIS_FLUSHER_URL"),
        redis_gateway_url=_env("TEST_REDIS_GATEWAY_URL"),
        redis_timeline_url=_env("TEST_REDIS_TIMELINE_URL"),
        mysql_admin_url=_env("TEST_MYSQL_ADMIN_URL"),
        mysql_flusher_url=_env("TEST_MYSQL_FLUSHER_URL"),
        mysql_timeline_url=_env("TEST_MYSQL_TIMELINE_URL"),
        mysql_ingest_url=_env("TEST_MYSQL_INGEST_URL"),
        pg_admin_url=_env("TEST_PG_ADMIN_URL"),
        pg_ingest_url=_env("TEST_PG_INGEST_URL"),
        pg_timeline_url=_env("TEST_PG_TIMELINE_URL"),
        pg_likes_url=_env("TEST_PG_LIKES_URL"),
        pg_flusher_url=_env("TEST_PG_FLUSHER_URL"),
        pg_likes_writer_url=_env("TEST_PG_LIKES_WRITER_URL"),
        jwt_secret=_env("TEST_JWT_SECRET"),
    )


@pytest.fixture(scope="session")
def spans() -> InMemorySpanExporter:
    """Every span of the session; tests clear it before they act."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    telemetry.instrument_libraries()
    return exporter


def _mysql_fixture(url: Callable[[Env], str], doc: str = "") -> Any:
    """A session fixture: a MysqlDatabase on `url(env)`, closed at the end."""

    async def fixture(env: Env) -> AsyncIterator[MysqlDatabase]:
        db = await MysqlDatabase.connect(url(env))
        yield db
        await db.close()

    fixture.__doc__ = doc or None
    return pytest_asyncio.fixture(scope="session")(fixture)


def _pool_fixture(url: Callable[[Env], str], name: str, doc: str = "") -> Any:
    """A session fixture: a PostgreSQL pool on `url(env)` as the role's service opens one
    (through PgBouncer in transaction pooling: no statement cache), closed at the end."""

    async def fixture(env: Env) -> AsyncIterator[asyncpg.Pool]:
        pool = await postgres.connect(url(env), max_size=10, name=name, statement_cache_size=0)
        yield pool
        await pool.close()

    fixture.__doc__ = doc or None
    return pytest_asyncio.fixture(scope="session")(fixture)


# Each service's own database user, as in production; the migrator's resets and checks.
_RESETS = "The migrator on agora_test: resets tables and checks stored state."
admin_db = _mysql_fixture(lambda env: env.mysql_admin_url, _RESETS)
flusher_db = _mysql_fixture(lambda env: env.mysql_flusher_url)
timeline_db = _mysql_fixture(lambda env: env.mysql_timeline_url)
pg_admin = _pool_fixture(lambda env: env.pg_admin_url, "tests", _RESETS)
pg_ingest = _pool_fixture(lambda env: env.pg_ingest_url, "ingest")
pg_timeline = _pool_fixture(lambda env: env.pg_timeline_url, "timeline")
pg_likes = _pool_fixture(lambda env: env.pg_likes_url, "likes")
pg_likes_writer = _pool_fixture(lambda env: env.pg_likes_writer_url, "likes")
pg_flusher = _pool_fixture(lambda env: env.pg_flusher_url, "flusher")


@pytest_asyncio.fixture(scope="session")
async def redis_client(env: Env) -> AsyncIterator[redis.Redis]:
    client = redis_client_module.connect(env.redis_url, cluster=ON_CLUSTER)
    yield client
    await client.aclose()


@pytest_asyncio.fixture
async def clean(admin_db: MysqlDatabase, pg_admin: asyncpg.Pool, redis_client: redis.Redis) -> None:
    """Empty tables plus the test accounts and the forum lab; an empty Redis database."""
    async with admin_db.connection() as conn:
        await conn.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table in TABLES:
            await conn.execute(f"TRUNCATE TABLE {table}")
        await conn.execute("SET FOREIGN_KEY_CHECKS = 1")
        await conn.executemany(
            "INSERT INTO zalo_accounts (id, display_name) VALUES (%s, %s)",
            [(a, f"Account {a}") for a in ACCOUNTS],
        )
    async with pg_admin.acquire() as conn:
        await conn.execute(f"TRUNCATE {PG_TABLES} RESTART IDENTITY")
        await load_lab(conn)
    await redis_client_module.flush_all(redis_client)


@pytest.fixture(scope="session")
def streams() -> MessageStreams:
    return MessageStreams(MessageStreamSettings().message_stream_prefix, SHARDS)


@pytest.fixture(scope="session")
def ingest_settings(env: Env) -> IngestSettings:
    return ingest_settings_for(env)


@pytest.fixture(scope="session")
def flusher_settings(env: Env) -> FlusherSettings:
    return FlusherSettings(
        redis_url=env.redis_flusher_url,
        mysql_url=env.mysql_flusher_url,
        postgres_url=env.pg_flusher_url,
        message_stream_shards=SHARDS,
        like_stream_shards=SHARDS,
        flusher_consumer_name="test-flusher",
        flusher_block_ms=10,
        prune_debounce_ms=0,
    )


@pytest_asyncio.fixture(scope="session")
async def ingest_server(
    spans: InMemorySpanExporter, ingest_settings: IngestSettings
) -> AsyncIterator[GrpcServer]:
    async with serving(await ingest_service.build(ingest_settings)) as server:
        yield server


@pytest_asyncio.fixture(scope="session")
async def timeline_server(spans: InMemorySpanExporter, env: Env) -> AsyncIterator[GrpcServer]:
    async with serving_timeline(env) as server:
        yield server


def _stub_fixture(
    server: str, stub: Callable[[grpc.aio.Channel], Any], doc: str = "", listener: int = 0
) -> Any:
    """A session fixture: `stub` on the `listener`-th API port of the server fixture named
    `server`, calling as the gateway does."""

    async def fixture(env: Env, **servers: GrpcServer) -> AsyncIterator[Any]:
        port = servers[server].ports[listener]
        async with gateway_stub(port, env.jwt_secret, stub) as connected:
            yield connected

    # pytest hands a fixture the fixtures its signature names: here `env` and that server.
    fixture.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in ("env", server)]
    )
    fixture.__doc__ = doc or None
    return pytest_asyncio.fixture(scope="session")(fixture)


ingest = _stub_fixture("ingest_server", ingest_service_pb2_grpc.IngestServiceStub)
timeline = _stub_fixture("timeline_server", timeline_service_pb2_grpc.TimelineServiceStub)
likes = _stub_fixture(
    "likes_server", like_service_pb2_grpc.LikeServiceStub, "The buffered likes service."
)
counterless_likes = _stub_fixture(
    "counterless_server", like_service_pb2_grpc.LikeServiceStub, "The counterless likes service."
)
forum_writes = _stub_fixture(
    "ingest_server",
    forum_write_service_pb2_grpc.ForumWriteServiceStub,
    "ForumWriteService, on ingest's second listener.",
    listener=1,
)
forum_reads = _stub_fixture(
    "timeline_server", forum_read_service_pb2_grpc.ForumReadServiceStub, "ForumReadService."
)
search = _stub_fixture(
    "timeline_server", search_service_pb2_grpc.SearchServiceStub, "SearchService, on timeline."
)


@pytest.fixture
def flusher(
    clean: None,
    flusher_settings: FlusherSettings,
    redis_client: redis.Redis,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
) -> Flusher:
    """Drains the message and like streams, in this process, on demand."""
    return Flusher(flusher_settings, redis_client, flusher_db, pg_flusher)


@pytest_asyncio.fixture
async def search_indexer(
    clean: None,
    flusher_settings: FlusherSettings,
    redis_client: redis.Redis,
    flusher_db: MysqlDatabase,
    pg_flusher: asyncpg.Pool,
) -> Indexer:
    """The search indexer on the suite's databases, in this process, as the flusher's: a test
    calls catch_up() once what it wrote is published."""
    indexer = Indexer(
        redis_client,
        LiveFeeds.from_settings(flusher_settings),
        SearchIndex(pg_flusher),
        MessageSource(flusher_db),
        ForumSource(pg_flusher),
        IndexerSettings(),
    )
    await indexer.start()
    return indexer


@pytest.fixture
def downstream(
    flusher: Flusher, admin_db: MysqlDatabase, redis_client: redis.Redis, streams: MessageStreams
) -> Downstream:
    """The streams, the flusher and MariaDB, on empty tables."""
    return Downstream(flusher, admin_db, redis_client, streams)


likes_server = likes_server_fixture("buffered", "The likes service in buffered mode (the default).")
sync_likes_server = likes_server_fixture("sync", "The likes service in sync mode.", redis_url=None)
counterless_server = likes_server_fixture("counterless", "The likes service in counterless mode.")


@pytest_asyncio.fixture(scope="session")
async def gateway(
    env: Env,
    ingest_server: GrpcServer,
    timeline_server: GrpcServer,
    likes_server: GrpcServer,
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the gateway app, started as uvicorn starts it (its lifespan)."""
    settings = gateway_settings(env, ingest_server, timeline_server, likes_server)
    async with serving_gateway(settings) as client:
        yield client


@pytest.fixture
def token(env: Env) -> str:
    """A token for user 7 granting accounts 1 and 2 (not 3)."""
    return mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
