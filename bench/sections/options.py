"""What the command line asked of the sections."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """What the command line asked for (bench/__main__.py)."""

    rows: int
    ingest_messages: int
    prune_messages: int
    prune_rounds: int
    samples: int
    warmup: int
    likes_open_seconds: float
    wrk_seconds: float
    scaling_rows: list[int]
    scaling_concurrency: list[int]
    scaling_seconds: float
    keep_rows: bool
    cluster_rounds: int = 3
    assignment_rows: int = 5_000_000
    assignment_accounts: int = 50_000
    search_documents: int = 5_000_000
    search_queried_messages: int = 3000
    search_rounds: int = 3
    search_lag_rate: float = 800.0
    search_lag_seconds: float = 30.0
    search_ingest_messages: int = 100_000
