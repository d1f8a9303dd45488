"""What a live feed stores for an event (services/streams/live.py): its payload within the feed's
budget, and for a post or comment what names it, so that a newer version of that object
supersedes the entry's text.

An event whose payload is larger than LIVE_MAX_EVENT_BYTES goes as `changed` (the object named,
with its version; the reader fetches it). A post's or comment's entry also carries its stub, the
same `changed` with reason SUPERSEDED: what a feed delivers instead once the object was edited or
removed (or its post, or its root comment), so that no removed or replaced text is read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from agora.events.v1 import live_events_pb2
from agora.forum.v1 import forum_pb2
from agora.live.v1 import changed_pb2

from services.streams.live import FeedEvent

Changed = changed_pb2.Changed
InboxEvent = live_events_pb2.InboxEvent
CourseEvent = live_events_pb2.CourseEvent


def inbox_entry(event: InboxEvent, max_bytes: int) -> FeedEvent:
    """A message or conversation event (nothing supersedes either: a message never changes, a
    conversation's state carries its own times)."""
    payload = event.SerializeToString()
    if len(payload) <= max_bytes:
        return FeedEvent(payload)
    changed = Changed(reason=Changed.REASON_TOO_LARGE)
    if event.HasField("message"):
        changed.kind = Changed.KIND_MESSAGE
        changed.msg_id = event.message.msg_id
        changed.conversation_key = event.message.thread_id
    else:
        changed.kind = Changed.KIND_CONVERSATION
        changed.conversation_key = event.conversation.thread_id
    return FeedEvent(_inbox_as(event, changed).SerializeToString())


def course_entry(event: CourseEvent, max_bytes: int) -> FeedEvent:
    """A post, comment or like count event; a post or comment names its target, version and
    what it lies within, and carries its stub."""
    change = event.WhichOneof("change")
    if change == "post":
        named = post_named(event.post.post, event.post.HasField("deleted_at"))
    elif change == "comment":
        named = comment_named(event.comment.comment, event.comment.HasField("deleted_at"))
    else:
        # A like count: a few dozen bytes, and a newer count is a state, not a text to withhold.
        return FeedEvent(event.SerializeToString())
    payload = event.SerializeToString()
    if len(payload) > max_bytes:
        payload = _course_as(event, withheld(named, Changed.REASON_TOO_LARGE)).SerializeToString()
    stub = _course_as(event, withheld(named, Changed.REASON_SUPERSEDED)).SerializeToString()
    return FeedEvent(
        payload,
        target=named.target,
        version=named.version,
        within=named.within,
        removes=named.removes,
        stub=stub,
    )


@dataclass(frozen=True)
class Named:
    """How a feed names a post's or comment's entry: its target, its version, the targets whose
    removal removes it too (a comment's post, a reply's root), whether it is a removal, and the
    `changed` that stands for it without its text."""

    target: str
    version: int
    within: tuple[str, ...]
    removes: bool
    changed: Changed


def post_named(post: forum_pb2.Post, removed: bool) -> Named:
    changed = Changed(kind=Changed.KIND_POST, post_id=post.id, version=post.version)
    return Named(f"post:{post.id}", post.version, (), removed, changed)


def comment_named(comment: forum_pb2.Comment, removed: bool) -> Named:
    changed = Changed(
        kind=Changed.KIND_COMMENT,
        comment_id=comment.id,
        post_id=comment.post_id,
        version=comment.version,
    )
    within: tuple[str, ...] = (f"post:{comment.post_id}",)
    if comment.HasField("parent_id"):
        changed.parent_id = comment.parent_id
        within += (f"comment:{comment.parent_id}",)
    return Named(f"comment:{comment.id}", comment.version, within, removed, changed)


def withheld(named: Named, reason: int) -> Changed:
    """`named`'s `changed` with why its content is withheld."""
    changed = Changed()
    changed.CopyFrom(named.changed)
    changed.reason = reason  # type: ignore[assignment]
    return changed


def _inbox_as(event: InboxEvent, changed: Changed) -> InboxEvent:
    """`event`'s envelope (account, trace context, commit time) around `changed`."""
    return _around(InboxEvent(account_id=event.account_id), event, changed)


def _course_as(event: CourseEvent, changed: Changed) -> CourseEvent:
    return _around(CourseEvent(course_id=event.course_id), event, changed)


Envelope = TypeVar("Envelope", InboxEvent, CourseEvent)


def _around(envelope: Envelope, event: Envelope, changed: Changed) -> Envelope:
    envelope.changed.CopyFrom(changed)
    envelope.trace_context.update(event.trace_context)
    envelope.committed_at.CopyFrom(event.committed_at)
    return envelope
