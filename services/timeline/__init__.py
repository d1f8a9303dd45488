"""timeline: the read side. Message timelines, unread counts, inbox; read-only SQL."""
