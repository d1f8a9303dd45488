"""Message streams → MySQL: the inbox's batch apply."""
