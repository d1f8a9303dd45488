"""ingest: the write front door. Validates message batches and appends them durably to Redis
(handlers.py, repository.py), records read marks and agent-sent messages, and writes the forum
(posts, comments, deletes) to PostgreSQL with their course events (forum_*.py)."""
