"""ingest's PostgreSQL access: forum posts and comments, counters in the same statement.

Every write is one statement (CTEs), so a counter can never disagree with the rows it counts, under
any concurrency: the row lock on the counted row serializes the increments, and each statement adds
only what it actually inserted or deleted (a like, a comment or a reply counts once, however often
it is retried). With it, in the same transaction, the write's course event goes to the outbox
(services/ingest/forum_live.py): built from the row the statement returned, so it is the object the
read routes return (writes.py). A create sent with an idempotency key keeps it in the same
transaction (keys.py).

By resource: posts.py and comments.py, each with its statements; a teacher's delete or edit of
another member's post or comment is logged in the moderation log by that statement, and an edit
keeps the replaced text as a revision (the edit statements' shared parts: edit_sql.py).
"""

from __future__ import annotations

from services.ingest.forum_repository.comments import CommentWrites, Parent
from services.ingest.forum_repository.keys import KeptKeys, Once, Replayed
from services.ingest.forum_repository.posts import PostWrites
from services.ingest.forum_repository.writes import Author, Edit, Written

__all__ = ["Author", "Edit", "ForumWriteRepository", "Once", "Parent", "Replayed", "Written"]


class ForumWriteRepository(PostWrites, CommentWrites, KeptKeys):
    """Forum writes; every method is one round trip or one transaction. Without an outbox the
    writes publish nothing (each is then one autocommitted statement)."""
