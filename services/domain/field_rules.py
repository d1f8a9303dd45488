"""What each request's fields must hold: the one table of gRPC field rules (enforced by
services/runtime/field_rules.py before the handler runs, after access).

A call breaking any rule answers INVALID_ARGUMENT with every violation at once, as BadRequest
field violations. The rules themselves are spelled once each, in the modules that own them (ids,
paging, text, instants); the gateway's OpenAPI document states the same bounds from the same
constants. What needs a datastore (is the account known, the user enrolled, the parent comment
in this post) is the handler's, after these.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from agora.forum.v1 import like_service_pb2

from services.domain.idempotency import check_key
from services.domain.ids import MAX_ROW_ID, check_id, check_row_id
from services.domain.instants import SECONDS_END, Limits, check_time
from services.domain.paging import MAX_LIKERS_LIMIT, MAX_MESSAGE_LIMIT, check_limit
from services.domain.text import MAX_BODY, MAX_TITLE, check_reason, check_text
from services.runtime.field_rules import Rule, RuleTable
from services.runtime.grpc_errors import FieldViolation

_LIKE_KINDS = (like_service_pb2.TARGET_KIND_POST, like_service_pb2.TARGET_KIND_COMMENT)
# The most targets one LikedMap asks about: a page of posts with their comments.
MAX_TARGETS = 500


def _present(violation: FieldViolation | None) -> Iterator[FieldViolation]:
    if violation is not None:
        yield violation


def account(request: Any) -> Iterator[FieldViolation]:
    """A Zalo account id (its existence is the handler's to check)."""
    if request.account_id <= 0:
        yield FieldViolation("account_id", "is required")


def zalo_id(field: str, *, required: bool = True) -> Rule:
    """A Zalo id (msg_id, thread id, conversation key): see services/domain/ids.py."""
    return lambda request: _present(check_id(getattr(request, field), field, required=required))


def row_ids(*fields: str) -> Rule:
    """Row ids a PostgreSQL bigint holds, each required."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        for field in fields:
            yield from _present(check_row_id(getattr(request, field), field))

    return rule


def page_limit(request: Any) -> Iterator[FieldViolation]:
    return _present(check_limit(request.limit))


def message_page_limit(request: Any) -> Iterator[FieldViolation]:
    return _present(check_limit(request.limit, MAX_MESSAGE_LIMIT))


def likers_page_limit(request: Any) -> Iterator[FieldViolation]:
    return _present(check_limit(request.limit, MAX_LIKERS_LIMIT))


def text(field: str, limit: int) -> Rule:
    """A post's title or a post's or comment's body: see services/domain/text.py."""
    return lambda request: _present(check_text(getattr(request, field), field, limit))


def optional_text(field: str, limit: int) -> Rule:
    """An edit's new title or body, when given: the same rule as text()."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        if request.HasField(field):
            yield from _present(check_text(getattr(request, field), field, limit))

    return rule


def some_edit(request: Any) -> Iterator[FieldViolation]:
    """A post's edit changes its title, its body or both: one of them must be given."""
    if not request.HasField("title") and not request.HasField("body"):
        yield FieldViolation("body", "give a new title, a new body or both")


def reason(request: Any) -> Iterator[FieldViolation]:
    """A moderation action's optional reason: see services/domain/text.py."""
    if request.HasField("reason"):
        yield from _present(check_reason(request.reason, "reason"))


def idempotency_key(request: Any) -> Iterator[FieldViolation]:
    """A create's optional retry key: see services/domain/idempotency.py."""
    return _present(check_key(request.idempotency_key))


def row_cursor(field: str, least: int) -> Rule:
    """An optional keyset cursor over row ids: when set, from `least` to what a bigint holds."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        value = getattr(request, field) if request.HasField(field) else least
        if value < least:
            yield FieldViolation(field, "must be a positive id")
        elif value > MAX_ROW_ID:
            yield FieldViolation(field, f"must be at most {MAX_ROW_ID}")

    return rule


def time_cursor(time_field: str, id_field: str) -> Rule:
    """An optional (time, id) keyset cursor, either half alone allowed: a time a datetime holds,
    an id above 0."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        if request.HasField(time_field):
            ts = getattr(request, time_field)
            if not 0 <= ts.nanos < 1_000_000_000 or not 0 < ts.seconds < SECONDS_END:
                yield FieldViolation(time_field, "is not a valid timestamp")
                return
        if request.HasField(id_field) and getattr(request, id_field) <= 0:
            yield FieldViolation(id_field, "must be a positive id")

    return rule


def parent_comment(request: Any) -> Iterator[FieldViolation]:
    """An optional parent of a reply: a comment's id when set."""
    if request.HasField("parent_id") and not 0 < request.parent_id <= MAX_ROW_ID:
        yield FieldViolation("parent_id", "must be a comment id")


def _like_target(target: Any, field: str) -> FieldViolation | None:
    if target.kind not in _LIKE_KINDS:
        return FieldViolation(f"{field}.kind", "must be POST or COMMENT")
    return check_row_id(target.id, f"{field}.id")


def like_target(request: Any) -> Iterator[FieldViolation]:
    return _present(_like_target(request.target, "target"))


def like_targets(request: Any) -> Iterator[FieldViolation]:
    if len(request.targets) > MAX_TARGETS:
        yield FieldViolation("targets", f"must hold at most {MAX_TARGETS}")
    for i, target in enumerate(request.targets):
        yield from _present(_like_target(target, f"targets[{i}]"))


def _batch(max_batch: int) -> Rule:
    def rule(request: Any) -> Iterator[FieldViolation]:
        if not request.messages:
            yield FieldViolation("messages", "must contain at least one message")
        elif len(request.messages) > max_batch:
            yield FieldViolation("messages", f"must contain at most {max_batch} messages")

    return rule


def _content(limit: int) -> Rule:
    def rule(request: Any) -> Iterator[FieldViolation]:
        if len(request.content) > limit:
            yield FieldViolation("content", f"must be at most {limit} characters")

    return rule


def _instant(field: str, limits: Limits) -> Rule:
    """An optional time the caller sends: see services/domain/instants.py."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        if request.HasField(field):
            yield from _present(
                check_time(getattr(request, field), field, datetime.now(UTC), limits)
            )

    return rule


_TIMELINE = "/agora.messaging.v1.TimelineService/"
_FORUM_READ = "/agora.forum.v1.ForumReadService/"
_FORUM_WRITE = "/agora.forum.v1.ForumWriteService/"
_LIKES = "/agora.forum.v1.LikeService/"
_INGEST = "/agora.messaging.v1.IngestService/"

_CONVERSATION = (account, zalo_id("conversation_key"))
_THREAD_PAGE = (page_limit, row_cursor("after_id", 0))

TIMELINE: RuleTable = {
    # Its `after` is any text: one that is no position of the feed is answered with a reset.
    _TIMELINE + "WatchInbox": (account,),
    _TIMELINE + "ListMessages": (
        *_CONVERSATION,
        message_page_limit,
        time_cursor("before_sent_at", "before_id"),
    ),
    _TIMELINE + "CountUnread": _CONVERSATION,
    _TIMELINE + "LatestIncoming": _CONVERSATION,
    _TIMELINE + "LatestOutgoing": _CONVERSATION,
    _TIMELINE + "GetMessage": (account, zalo_id("msg_id")),
    _TIMELINE + "GetQuotePayload": (account, zalo_id("msg_id")),
    _TIMELINE + "ListConversations": (
        account,
        page_limit,
        time_cursor("before_last_message_at", "before_id"),
    ),
}

FORUM_READ: RuleTable = {
    # Its user_id is required only for an end user's watch: the handler knows whose it is.
    _FORUM_READ + "WatchCourse": (row_ids("course_id"),),
    _FORUM_READ + "ListCourses": (row_ids("user_id"), page_limit, row_cursor("after_id", 0)),
    _FORUM_READ + "ListPosts": (
        row_ids("course_id", "user_id"),
        page_limit,
        row_cursor("before_id", 1),
    ),
    _FORUM_READ + "GetPost": (row_ids("course_id", "post_id", "user_id"),),
    _FORUM_READ + "GetComment": (row_ids("course_id", "comment_id", "user_id"),),
    _FORUM_READ + "ListComments": (row_ids("course_id", "post_id", "user_id"), *_THREAD_PAGE),
    _FORUM_READ + "ListReplies": (row_ids("course_id", "comment_id", "user_id"), *_THREAD_PAGE),
    _FORUM_READ + "ListRevisions": (
        row_ids("course_id", "user_id"),
        like_target,
        page_limit,
        row_cursor("before_id", 1),
    ),
    _FORUM_READ + "ListModerationActions": (
        row_ids("course_id", "user_id"),
        page_limit,
        row_cursor("before_id", 1),
    ),
    _FORUM_READ + "ListLikers": (
        row_ids("course_id", "user_id"),
        like_target,
        likers_page_limit,
        time_cursor("before_liked_at", "before_user_id"),
    ),
}

FORUM_WRITE: RuleTable = {
    _FORUM_WRITE + "CreatePost": (
        row_ids("course_id", "user_id"),
        text("title", MAX_TITLE),
        text("body", MAX_BODY),
        idempotency_key,
    ),
    _FORUM_WRITE + "CreateComment": (
        row_ids("course_id", "post_id", "user_id"),
        text("body", MAX_BODY),
        parent_comment,
        idempotency_key,
    ),
    _FORUM_WRITE + "DeletePost": (row_ids("course_id", "post_id", "user_id"), reason),
    _FORUM_WRITE + "DeleteComment": (row_ids("course_id", "comment_id", "user_id"), reason),
    _FORUM_WRITE + "EditPost": (
        row_ids("course_id", "post_id", "user_id"),
        optional_text("title", MAX_TITLE),
        optional_text("body", MAX_BODY),
        some_edit,
        reason,
    ),
    _FORUM_WRITE + "EditComment": (
        row_ids("course_id", "comment_id", "user_id"),
        text("body", MAX_BODY),
        reason,
    ),
}

LIKES: RuleTable = {
    _LIKES + "SetLike": (row_ids("user_id", "course_id"), like_target),
    _LIKES + "LikedMap": (row_ids("user_id", "course_id"), like_targets),
}


def ingest(max_batch: int, limits: Limits) -> RuleTable:
    """IngestService's rules, with its configured bounds. A message of a batch is checked one by
    one by ingest itself (services/ingest/validation.py): a bad one is rejected, not the batch."""
    return {
        _INGEST + "IngestMessages": (account, _batch(max_batch), idempotency_key),
        _INGEST + "RecordAgentSent": (
            account,
            zalo_id("thread_id"),
            zalo_id("cli_msg_id"),
            zalo_id("msg_id", required=False),
            _content(limits.content_max_chars),
            _instant("sent_at", limits),
            idempotency_key,
        ),
        _INGEST + "MarkRead": (account, zalo_id("conversation_key"), _instant("read_at", limits)),
    }
