"""Stream metrics: what consumers commit and dead-letter; what the monitor samples from Redis."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

FLUSHED_MESSAGES = Counter(
    "agora_flush_entries", "Stream units (messages, likes) committed by the flusher", ["stream"]
)

FLUSH_BATCHES = Counter(
    "agora_flush_batches", "Batch transactions committed by the flusher", ["stream"]
)

DEAD_LETTERS = Counter("agora_dead_letters", "Entries moved to a dead-letter stream", ["stream"])

DEAD_LETTERS_TRIMMED = Counter(
    "agora_dead_letters_trimmed",
    "Dead letters dropped by the dead-letter streams' cap (DEAD_LETTER_MAX_ENTRIES): gone for good",
    ["stream"],
)

FLUSH_BATCH_SIZE = Histogram(
    "agora_flush_batch_size",
    "Units (messages, likes) per committed batch",
    ["stream"],
    buckets=(1, 5, 10, 25, 50, 100, 200, 300, 500, 1000),
)

FLUSH_BATCH_SECONDS = Histogram(
    "agora_flush_batch_seconds",
    "Time to apply and acknowledge one batch",
    ["stream"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

# Sampled from Redis by the stream monitor, per stream shard.

STREAM_LENGTH = Gauge("agora_stream_length", "Entries in a stream shard", ["stream"])

STREAM_LAG = Gauge(
    "agora_stream_lag", "Entries not yet delivered to the consumer group", ["stream"]
)

STREAM_PENDING = Gauge(
    "agora_stream_pending", "Entries delivered and not yet acknowledged", ["stream"]
)

STREAM_OLDEST_PENDING = Gauge(
    "agora_stream_oldest_pending_seconds", "Age of the oldest unacknowledged entry", ["stream"]
)

DEAD_LETTERS_WAITING = Gauge(
    "agora_dead_letters_waiting", "Entries in a dead-letter stream", ["stream"]
)

MESSAGE_BACKLOG = Gauge("agora_message_backlog", "Messages accepted by ingest, not yet flushed")
# What ingest refuses past (MESSAGE_QUEUE_MAX), so alerts compare against the configured bound
# instead of restating it.
MESSAGE_BACKLOG_BOUND = Gauge(
    "agora_message_backlog_bound",
    "Messages the backlog may hold before ingest answers RESOURCE_EXHAUSTED",
    multiprocess_mode="max",
)

REDIS_EVICTED_KEYS = Gauge("agora_redis_evicted_keys", "Redis INFO evicted_keys (must stay 0)")

REDIS_USED_MEMORY = Gauge("agora_redis_used_memory_bytes", "Redis INFO used_memory")

REDIS_MAXMEMORY = Gauge("agora_redis_maxmemory_bytes", "Redis maxmemory (0 = unlimited)")

STREAM_STALLED = Gauge(
    "agora_stream_stalled",
    "1 while a shard's consumer retries a batch the infrastructure refuses (not its data)",
    ["stream"],
)

STALL_RETRIES = Counter(
    "agora_stream_stall_retries",
    "Batch retries after a transient or infrastructure failure",
    ["stream", "kind"],
)

# What the flusher trims a dead-letter stream to, so alerts compare its length against the
# configured cap instead of restating it.
DEAD_LETTER_CAP = Gauge(
    "agora_dead_letter_cap",
    "Entries a dead-letter stream keeps (DEAD_LETTER_MAX_ENTRIES); past it the oldest are trimmed",
    ["stream"],
)

DEAD_LETTER_OLDEST = Gauge(
    "agora_dead_letter_oldest_seconds",
    "Age of the oldest entry of a dead-letter stream",
    ["stream"],
)

BACKLOG_BYTES = Gauge(
    "agora_backlog_bytes", "Bytes appended and not yet flushed, per stream family", ["family"]
)

# The live feeds (services/streams/live.py).

LIVE_FEEDS_DROPPED = Counter(
    "agora_live_feeds_dropped",
    "Feeds that could not take an append and began a new epoch (their watchers reset): past the"
    " memory ceiling, Redis full, or a detached live Redis out of reach",
    ["reason"],
)
