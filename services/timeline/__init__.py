"""timeline: the read side, read-only SQL. Message timelines, unread counts, the inbox and quotes
(handlers.py, repository.py), forum reads (forum_*.py), and the live watches of inboxes and
courses (feed_hub.py, watch.py)."""
