"""The agora services: ingest, timeline, flusher, gateway, and their shared runtime."""
