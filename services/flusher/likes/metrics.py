"""Metrics of the like flush and of counter reconciliation."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LIKES_FLUSHED = Counter("agora_likes_flushed", "Like events applied to PostgreSQL")

LIKE_FLUSH_LAG = Histogram(
    "agora_like_flush_lag_seconds",
    "From the like's XADD to its COMMIT",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30),
)

COUNTER_DRIFT = Counter(
    "agora_like_counter_drift", "like_count rows reconciliation found wrong and fixed", ["kind"]
)
