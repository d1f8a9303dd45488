"""Metrics of retention: prune, archive partitions, cleanup, periodic jobs."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

PRUNE_BACKLOG = Gauge(
    "agora_prune_backlog", "Conversations waiting to be pruned (due or being pruned)"
)

PRUNED_ROWS = Counter(
    "agora_prune_rows", "Rows removed from zalo_messages by prune", ["action"]
)  # action: deleted | archived

PRUNE_RUNS = Counter("agora_prune_runs", "Conversation prunes completed")

PRUNE_LOCK_CONTENTION = Counter(
    "agora_prune_lock_contention", "Prunes skipped because another holder had the lock"
)

ARCHIVE_PMAX_ROWS = Gauge(
    "agora_archive_pmax_rows", "Rows in the archive's pmax partition (should be 0)"
)

ARCHIVE_PARTITIONS = Gauge("agora_archive_partitions", "Monthly partitions of the archive")

CLEANUP_ROWS = Counter("agora_cleanup_rows", "Rows deleted by retention cleanup", ["table"])

JOB_RUNS = Counter("agora_job_runs", "Periodic job runs", ["job", "outcome"])
