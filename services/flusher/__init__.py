"""flusher: every asynchronous consumer. Message streams → MySQL, ACK only after COMMIT."""
