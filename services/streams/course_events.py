"""Course events (agora.events.v1.CourseEvent): what a course's live feed carries, built in one
place for every writer — ingest (posts and comments), the flusher and the likes service (like
counts).

A post or comment event carries the object as the forum's read routes return it (the writer
converts its row as the reads do, services/domain/forum.py) with its version; a delete carries
the object's ids, counts and deleted_at, never its text. A like count is the target's stored
like_count as committed, at most one per target per batch, and only for a target that is still
visible (a deleted post, comment or thread is shown nowhere). Every event carries the W3C context
of the span it was built in and when its write committed. What the feed stores for each is
services/streams/live_entries.py's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from agora.events.v1 import live_events_pb2
from agora.forum.v1 import forum_pb2, forum_read_service_pb2, like_service_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import propagate, trace

from services.runtime.timeutil import to_timestamp, utc_now
from services.streams.likes import TargetKind
from services.streams.live import LivePublisher
from services.streams.live_entries import course_entry

CourseEvent = live_events_pb2.CourseEvent
_tracer = trace.get_tracer(__name__)


def post_event(
    course_id: int, post: forum_pb2.Post, deleted_at: datetime | None = None
) -> CourseEvent:
    """A post created or edited (or deleted, with `deleted_at`: without its title and body) as
    its course's event."""
    if deleted_at is not None:
        post.ClearField("title")
        post.ClearField("body")
    change = _deleted_at(forum_read_service_pb2.PostEvent(post=post), deleted_at)
    return CourseEvent(course_id=course_id, post=change)


def comment_event(
    course_id: int, comment: forum_pb2.Comment, deleted_at: datetime | None = None
) -> CourseEvent:
    """A comment or reply created or edited (or deleted, with `deleted_at`: without its body)
    as its course's event."""
    if deleted_at is not None:
        comment.ClearField("body")
    change = _deleted_at(forum_read_service_pb2.CommentEvent(comment=comment), deleted_at)
    return CourseEvent(course_id=course_id, comment=change)


_Change = TypeVar("_Change", forum_read_service_pb2.PostEvent, forum_read_service_pb2.CommentEvent)


def _deleted_at(change: _Change, deleted_at: datetime | None) -> _Change:
    """`change`, marked deleted at `deleted_at` when there is one."""
    if deleted_at is not None:
        change.deleted_at.CopyFrom(to_timestamp(deleted_at))
    return change


def stamp(events: Iterable[CourseEvent], committed_at: Timestamp | None = None) -> None:
    """Give each event the current trace context and its commit time (now, unless given)."""
    context: dict[str, str] = {}
    propagate.inject(context)
    at = committed_at if committed_at is not None else to_timestamp(utc_now())
    for event in events:
        event.trace_context.update(context)
        event.committed_at.CopyFrom(at)


@dataclass(frozen=True)
class LikeCount:
    """A target's stored like count, with where it is shown."""

    kind: TargetKind
    target_id: int
    like_count: int
    course_id: int
    post_id: int  # the post itself for a post

    def event(self) -> CourseEvent:
        likes = forum_read_service_pb2.LikeCount(
            target=like_service_pb2.Target(kind=self.kind, id=self.target_id),
            like_count=self.like_count,
            post_id=self.post_id,
        )
        return CourseEvent(course_id=self.course_id, likes=likes)


class LikeCountPublication:
    """Puts like counts on their courses' feeds: one event per target per call."""

    def __init__(self, publisher: LivePublisher) -> None:
        self._publisher = publisher
        self._feeds = publisher.feeds

    async def publish(self, counts: Iterable[LikeCount]) -> int:
        """Returns how many events were published; raises what the publisher raises."""
        last: dict[tuple[int, int], LikeCount] = {}
        for count in counts:
            last[(int(count.kind), count.target_id)] = count
        if not last:
            return 0
        with _tracer.start_as_current_span("live.publish likes") as span:
            feeds: dict[str, list[CourseEvent]] = {}
            for key in sorted(last):
                count = last[key]
                feeds.setdefault(self._feeds.course(count.course_id), []).append(count.event())
            stamp(event for events in feeds.values() for event in events)
            span.set_attribute("agora.live.events", len(last))
            budget = self._feeds.max_event_bytes
            await self._publisher.publish(
                {feed: [course_entry(e, budget) for e in events] for feed, events in feeds.items()}
            )
        return len(last)
