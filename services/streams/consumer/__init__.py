"""At-least-once consumption of one stream shard, with ACK only after the handler's COMMIT.

The loop every flusher consumer shares (loop.py): wait until what a previous owner left pending
is safe to take (idle longer than a lease) and claim it, read this consumer's own pending
entries before new ones (reading.py), hand a batch to the handler (one transaction, fenced by
the takeover's epoch), then XACK + XDEL and give the batch's units and bytes back to the backlog
bound (acks.py). Its scripts are the .lua files in lua/.

What a failure means decides what happens (services/runtime/errors.py):
- the data is refused (DATA): the batch is split until each message lands or fails alone, and
  what keeps failing moves to the dead-letter stream (bad_data.py);
- anything else (a connection, a timeout, a revoked grant, a missing table, Redis out of memory)
  stalls the shard: the same batch is retried with jittered backoff (retry.py), never counted as
  a delivery, and the stall is visible in agora_stream_stalled until the infrastructure is fixed;
- the lease was taken over (Fenced): the consumer stops; the batch rolled back.

The span and the metrics of each batch wrap the apply step (observed.py).
"""

from services.streams.consumer.acks import failures_key
from services.streams.consumer.config import (
    Backlog,
    BatchHandler,
    ConsumedShard,
    ConsumerConfig,
    ConsumerStats,
)
from services.streams.consumer.loop import ShardConsumer

__all__ = [
    "Backlog",
    "BatchHandler",
    "ConsumedShard",
    "ConsumerConfig",
    "ConsumerStats",
    "ShardConsumer",
    "failures_key",
]
