"""likes: like, unlike and "what have I liked", checked first (access.py), in one of three modes:
buffered in Redis and flushed later (buffered_store.py), straight to PostgreSQL (sync_store.py),
or to PostgreSQL without counters (counterless_store.py); direct_writes.py orders the last two
with buffered pods during a mode switch."""
