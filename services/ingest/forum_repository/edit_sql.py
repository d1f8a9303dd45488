"""What the edit statements of a post and of a comment share, written once."""

from __future__ import annotations

from services.domain.forum import TEACHES_COURSE


def may_edit(alias: str, window: str) -> str:
    """Who may edit a post or comment (`alias`) of course $2: its author $3 while the edit
    window (`window`, in seconds) lasts, a teacher of the course at any time."""
    teaches = TEACHES_COURSE.format(course="$2", user="$3")
    return f"""(
    {alias}.user_id = $3 AND {alias}.created_at > now() - make_interval(secs => {window})
    OR {teaches})"""


def as_edited(columns: str, table: str) -> str:
    """An edit's answer: the row as its update left it, changed; or, when the edit changed
    nothing (no update), the row as it is, unchanged. None at all when `old` found no row."""
    return f"""SELECT {columns}, true AS changed FROM upd
UNION ALL
SELECT {columns}, false FROM {table}
WHERE id = (SELECT id FROM old) AND NOT EXISTS (SELECT 1 FROM upd)"""
