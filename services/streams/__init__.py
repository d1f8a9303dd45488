"""The stream contract: layouts, entry encoding, the producer helper and the consumer framework.

Producers (ingest, likes) and the consumer (flusher) import this package; nothing else spells a
stream key, field name or consumer group.
"""
