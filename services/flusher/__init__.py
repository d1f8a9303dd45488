"""flusher: every asynchronous consumer, ACK only after COMMIT. Message streams → MySQL
(messages/), like streams → PostgreSQL and counter reconciliation (likes/), the periodic
maintenance and the course outbox relay (maintenance/), one fenced consumer per leased shard
(shards.py, fencing.py)."""
