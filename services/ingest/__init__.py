"""ingest: the write front door. Validates message batches and appends them durably to Redis."""
