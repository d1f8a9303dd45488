"""Wires the maintenance role: the prune loop and the periodic jobs (one runner per period)."""

from __future__ import annotations

import asyncio

import asyncpg
import redis.asyncio as redis

from services.flusher.config import FlusherSettings
from services.flusher.likes.reconcile import Reconciler
from services.flusher.maintenance.outbox import OutboxRelay
from services.flusher.maintenance.periodic import Job, PeriodicJobs
from services.flusher.maintenance.prune import PruneQueue, Pruner, PruneSettings
from services.flusher.maintenance.retention import RetentionJobs
from services.flusher.maintenance.retention_repository import RetentionRepository
from services.flusher.maintenance.snoozes import SnoozeWaker
from services.runtime.loops import until_done
from services.runtime.mysql import MysqlDatabase
from services.runtime.service import BackgroundJob
from services.streams.live import LivePublisher


def prune_queue(settings: FlusherSettings, client: redis.Redis) -> PruneQueue | None:
    """Where message batches schedule prunes; None when pruning is switched off."""
    return PruneQueue(client) if settings.prune_enabled else None


def pruner(settings: FlusherSettings, client: redis.Redis, mysql: MysqlDatabase) -> Pruner:
    return Pruner(
        RetentionRepository(mysql),
        PruneQueue(client),
        client,
        PruneSettings(
            keep=settings.retention_keep_per_conversation,
            chunk=settings.prune_chunk,
            archive=settings.archive_enabled,
            debounce_ms=settings.prune_debounce_ms,
            concurrency=settings.prune_concurrency,
        ),
    )


def outbox_relay(
    settings: FlusherSettings, pg: asyncpg.Pool, publisher: LivePublisher
) -> OutboxRelay:
    """The relay of course events a forum writer left in the outbox."""
    return OutboxRelay(
        pg,
        publisher,
        after_seconds=settings.live_outbox_relay_after_seconds,
        every_seconds=settings.live_outbox_poll_seconds,
    )


def retention_jobs(settings: FlusherSettings, mysql: MysqlDatabase) -> RetentionJobs:
    return RetentionJobs(
        mysql,
        RetentionRepository(mysql),
        archive_retention_months=settings.archive_retention_months,
        agent_sent_retention_days=settings.agent_sent_retention_days,
        receipt_retention_days=settings.receipt_retention_days,
    )


def periodic_jobs(
    settings: FlusherSettings,
    client: redis.Redis,
    jobs: RetentionJobs,
    reconcile: Reconciler,
    snoozes: SnoozeWaker | None = None,
) -> PeriodicJobs:
    interval = settings.maintenance_interval_seconds

    async def partitions() -> None:
        await jobs.maintain_partitions()

    async def cleanup() -> None:
        await jobs.cleanup_agent_sent()
        await jobs.cleanup_receipts()

    async def recount_dirty() -> None:
        await reconcile.recount_dirty()

    async def recount_all() -> None:
        await reconcile.recount_all()

    schedule = [
        Job("cleanup-agent-sent", interval, cleanup),
        Job("capacity-sample", interval, jobs.sample_capacity),
        Job("reconcile-dirty-likes", settings.reconcile_interval_seconds, recount_dirty),
        Job("reconcile-all-likes", settings.reconcile_full_interval_seconds, recount_all, 3600),
    ]
    if settings.archive_enabled:
        schedule.append(Job("archive-partitions", interval, partitions))
    if snoozes is not None:

        async def wake_snoozed() -> None:
            await snoozes.wake_due()

        schedule.append(Job("wake-snoozed", settings.snooze_wake_interval_seconds, wake_snoozed))
    return PeriodicJobs(client, schedule)


def build(
    settings: FlusherSettings,
    client: redis.Redis,
    mysql: MysqlDatabase,
    reconcile: Reconciler,
    publisher: LivePublisher,
) -> list[BackgroundJob]:
    """The maintenance loops; archive partitions are made current before the first prune."""
    jobs = retention_jobs(settings, mysql)
    snoozes = SnoozeWaker(mysql, publisher)
    background: list[BackgroundJob] = [
        periodic_jobs(settings, client, jobs, reconcile, snoozes).run
    ]
    if settings.prune_enabled:
        prune = pruner(settings, client, mysql)

        async def prune_after_partitions(stop: asyncio.Event) -> None:
            # This month's and next month's partitions must exist before a row is archived
            # (retried while MySQL is away: the process starts regardless).
            if not settings.archive_enabled or await until_done(
                stop, jobs.maintain_partitions, every=1.0, name="archive partitions"
            ):
                await prune.run(stop)

        background.append(prune_after_partitions)
    return background
