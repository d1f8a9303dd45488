"""Developer commands of the local stack (make token, demo data, health waits)."""
