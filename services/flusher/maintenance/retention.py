"""Retention jobs: archive partition maintenance, agent-sent and receipt cleanup, capacity
sampling."""

from __future__ import annotations

import logging
from dataclasses import KW_ONLY, dataclass
from datetime import date, datetime, timedelta

from services.flusher.maintenance import capacity, metrics
from services.flusher.maintenance.retention_repository import (
    RetentionRepository,
    add_months,
    month_start,
)
from services.runtime.mysql import MysqlDatabase
from services.runtime.timeutil import utc_now

log = logging.getLogger(__name__)

# ER_SAME_NAME_PARTITION: another replica created the partition between our read and our ALTER.
_DUPLICATE_PARTITION = 1517


@dataclass(frozen=True)
class PartitionReport:
    created: list[str]
    dropped: list[str]
    pmax_rows: int


@dataclass(frozen=True)
class RetentionJobs:
    """The periodic work that keeps the inbox tables bounded."""

    db: MysqlDatabase
    repo: RetentionRepository
    _: KW_ONLY
    archive_retention_months: int
    agent_sent_retention_days: int
    receipt_retention_days: int = 30
    cleanup_chunk: int = 1000

    async def maintain_partitions(self, today: date | None = None) -> PartitionReport:
        """Partitions for this month and the next exist; months past retention are dropped.

        Idempotent: a second run (or a concurrent one on another replica) changes nothing.
        """
        today = today or utc_now().date()
        current = month_start(today)
        created = []
        for month in (current, add_months(current, 1)):
            partitions = await self.repo.partitions()
            newest = max((p.month for p in partitions if p.month), default=None)
            # Range partitions only grow at the top; an older month is covered by a lower range.
            if newest is not None and month <= newest:
                continue
            try:
                await self.repo.add_month_partition(month)
                created.append(f"p{month:%Y%m}")
            except Exception as exc:
                if getattr(exc, "args", [None])[0] != _DUPLICATE_PARTITION:
                    raise
        oldest_kept = add_months(current, -self.archive_retention_months)
        dropped = []
        for partition in await self.repo.partitions():
            # A partition holds rows below its upper bound, i.e. months before the next one.
            if partition.month is not None and add_months(partition.month, 1) <= oldest_kept:
                await self.repo.drop_partition(partition.name)
                dropped.append(partition.name)
        pmax = await self.repo.pmax_rows()
        partitions = await self.repo.partitions()
        metrics.ARCHIVE_PMAX_ROWS.set(pmax)
        metrics.ARCHIVE_PARTITIONS.set(sum(1 for p in partitions if p.month))
        if pmax:
            log.warning("%d archived rows are in pmax: a monthly partition is missing", pmax)
        if created or dropped:
            log.info("archive partitions: created %s, dropped %s", created, dropped)
        return PartitionReport(created, dropped, pmax)

    async def cleanup_agent_sent(self, now: datetime | None = None) -> int:
        """Delete agent-sent records older than the retention, in chunks; returns rows deleted."""
        cutoff = (now or utc_now()) - timedelta(days=self.agent_sent_retention_days)
        total = 0
        while deleted := await self.repo.delete_agent_sent_before(cutoff, self.cleanup_chunk):
            total += deleted
            metrics.CLEANUP_ROWS.labels("zalo_agent_sent_messages").inc(deleted)
        return total

    async def cleanup_receipts(self, now: datetime | None = None) -> int:
        """Delete receipts logged before their retention, in chunks; returns rows deleted."""
        cutoff = (now or utc_now()) - timedelta(days=self.receipt_retention_days)
        total = 0
        while deleted := await self.repo.delete_receipts_before(cutoff, self.cleanup_chunk):
            total += deleted
            metrics.CLEANUP_ROWS.labels("zalo_message_receipts").inc(deleted)
        return total

    async def sample_capacity(self) -> None:
        await capacity.record_snapshot(self.db, utc_now().replace(microsecond=0))
