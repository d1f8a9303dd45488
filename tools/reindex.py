"""`make reindex`: the search index rebuilt from MariaDB and PostgreSQL (docs/search.md).

Every account's messages (live and archived) and every course's live posts and comments are
read from their tables and replace that tenant's documents, one tenant per transaction, with the
tenant's feed position taken before its tables are read: the indexer (in the flusher) goes on
from there and what it repeats is idempotent. Searches keep answering while it runs. Runs with
the flusher's identity and settings (its database users are the ones that write the index).

  python -m tools.reindex [--accounts 1,2] [--courses 42] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from services.flusher.config import FlusherSettings
from services.runtime import postgres, redis_client
from services.runtime.mysql import MysqlDatabase
from services.search.indexer import Indexer, IndexerSettings
from services.search.repository import ForumSource, MessageSource, SearchIndex
from services.streams.live import LiveFeeds


async def _ids(
    page: Callable[[int, int], Awaitable[list[int]]], only: list[int] | None
) -> list[int]:
    if only is not None:
        return only
    ids: list[int] = []
    while batch := await page(ids[-1] if ids else 0, 5000):
        ids += batch
    return ids


async def reindex(
    settings: FlusherSettings,
    accounts: list[int] | None,
    courses: list[int] | None,
    concurrency: int,
) -> tuple[int, int, int]:
    """(tenants, texts, seconds)."""
    mysql = await MysqlDatabase.connect(settings.mysql_url, maxsize=concurrency + 1)
    pg = await postgres.connect(
        settings.postgres_url,
        max_size=concurrency + 1,
        name="reindex",
        statement_cache_size=settings.postgres_statement_cache_size,
    )
    # The feeds' Redis: their own when LIVE_REDIS_URL is set, else the service's.
    if settings.live_redis_url:
        cluster = settings.live_redis_cluster
        client = redis_client.connect(
            settings.live_redis_url,
            cluster=settings.redis_cluster if cluster is None else cluster,
        )
    else:
        client = redis_client.connect(settings.redis_url, cluster=settings.redis_cluster)
    try:
        feeds = LiveFeeds.from_settings(settings, own_redis=bool(settings.live_redis_url))
        messages, forum = MessageSource(mysql), ForumSource(pg)
        indexer = Indexer(client, feeds, SearchIndex(pg), messages, forum, IndexerSettings())
        tenants = [feeds.inbox(a) for a in await _ids(messages.account_ids, accounts)]
        tenants += [feeds.course(c) for c in await _ids(forum.course_ids, courses)]
        started = time.monotonic()
        texts = 0
        gate = asyncio.Semaphore(concurrency)

        async def one(feed: str) -> None:
            nonlocal texts
            async with gate:
                indexed = await indexer.rebuild(feed)
            texts += indexed

        await asyncio.gather(*(one(feed) for feed in tenants))
        return len(tenants), texts, round(time.monotonic() - started)
    finally:
        await client.aclose()
        await pg.close()
        await mysql.close()


def _list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=_list, help="only these accounts (comma-separated)")
    parser.add_argument("--courses", type=_list, help="only these courses (comma-separated)")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    if args.accounts is not None and args.courses is None:
        args.courses = []
    if args.courses is not None and args.accounts is None:
        args.accounts = []
    tenants, texts, seconds = asyncio.run(
        # Settings from the environment (the flusher's), as the service reads them.
        reindex(FlusherSettings.model_validate({}), args.accounts, args.courses, args.concurrency)
    )
    print(f"reindexed {texts} texts of {tenants} accounts and courses in {seconds} s")


if __name__ == "__main__":
    main()
