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
from agora.messaging.v1 import message_pb2, timeline_service_pb2

from services.domain.idempotency import FIELD as KEY_FIELD
from services.domain.idempotency import check_key
from services.domain.ids import MAX_ROW_ID, check_id, check_row_id
from services.domain.instants import EARLIEST_SECONDS, SECONDS_END, Limits, check_time
from services.domain.paging import MAX_LIKERS_LIMIT, MAX_MESSAGE_LIMIT, check_limit
from services.domain.search_text import MAX_PAGE as MAX_SEARCH_LIMIT
from services.domain.search_text import Query, QueryError
from services.domain.team import check_canned_body, check_role, check_shortcut
from services.domain.text import MAX_BODY, MAX_TITLE, check_reason, check_text
from services.runtime.field_rules import Rule, RuleTable
from services.runtime.grpc_errors import FieldViolation

_ASSIGNEE_FILTERS = (
    timeline_service_pb2.ASSIGNEE_FILTER_UNSPECIFIED,
    timeline_service_pb2.ASSIGNEE_FILTER_NONE,
    timeline_service_pb2.ASSIGNEE_FILTER_USER,
)
_STATUSES = (
    message_pb2.CONVERSATION_STATUS_OPEN,
    message_pb2.CONVERSATION_STATUS_RESOLVED,
    message_pb2.CONVERSATION_STATUS_SNOOZED,
)
_FILTER_STATUSES = (message_pb2.CONVERSATION_STATUS_UNSPECIFIED, *_STATUSES)
_LIKE_KINDS = (like_service_pb2.TARGET_KIND_POST, like_service_pb2.TARGET_KIND_COMMENT)
# The most targets one LikedMap asks about: a page of posts with their comments.
MAX_TARGETS = 500
# The most accounts one listener's stream holds (a listener process holds a few hundred
# sessions at most), and the longest name it gives itself.
MAX_LISTEN_ACCOUNTS = 1000
MAX_LISTENER_ID = 255
# How far ahead a rate limit may hold an account (Zalo's are minutes to hours).
MAX_RETRY_AHEAD_SECONDS = 86_400
# The furthest a snooze may reach: a year (a conversation put away longer is resolved).
MAX_SNOOZE_SECONDS = 366 * 86_400
# failure_reason's column.
MAX_FAILURE_REASON = 500
_FAILURE_CLASSES = (
    message_pb2.FAILURE_CLASS_RETRYABLE,
    message_pb2.FAILURE_CLASS_PERMANENT,
    message_pb2.FAILURE_CLASS_RATE_LIMITED,
)


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


def one_timeline_place(request: Any) -> Iterator[FieldViolation]:
    """A conversation's page is read from one place: its newest messages, before a cursor,
    after one, or around a message; never two of them."""
    before = request.HasField("before_sent_at") or request.HasField("before_id")
    after = request.HasField("after_sent_at") or request.HasField("after_id")
    if request.around_msg_id and (before or after):
        yield FieldViolation("around_msg_id", "is not given with a before_* or after_* cursor")
    elif before and after:
        field = "after_sent_at" if request.HasField("after_sent_at") else "after_id"
        yield FieldViolation(field, "is not given with a before_* cursor")


def inbox_filter(request: Any) -> Iterator[FieldViolation]:
    """The inbox's filters: a known assignee filter, with a user id exactly when it names an
    agent; a known status (unset: any)."""
    if request.assignee not in _ASSIGNEE_FILTERS:
        yield FieldViolation("assignee", "must be NONE or USER (unset: any)")
    elif request.assignee == timeline_service_pb2.ASSIGNEE_FILTER_USER:
        yield from _present(check_row_id(request.assignee_user_id, "assignee_user_id"))
    elif request.assignee_user_id:
        yield FieldViolation("assignee_user_id", "is given only with the USER filter")
    if request.status not in _FILTER_STATUSES:
        yield FieldViolation("status", "must be OPEN, RESOLVED or SNOOZED (unset: any)")


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


def _reply_content(limit: int) -> Rule:
    """A reply's text: something to send, within the bound of an ingested message's."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        if not request.content.strip():
            yield FieldViolation("content", "is required (a reply says something)")
        elif len(request.content) > limit:
            yield FieldViolation("content", f"must be at most {limit} characters")
        elif "\x00" in request.content:
            yield FieldViolation("content", "must not contain NUL characters")

    return rule


def required_key(request: Any) -> Iterator[FieldViolation]:
    """A send's retry key: required, for a reply must never go twice (idempotency.py)."""
    if not request.idempotency_key:
        yield FieldViolation(KEY_FIELD, "is required: a retry with it never sends twice")
    else:
        yield from _present(check_key(request.idempotency_key))


def _receipts_batch(max_batch: int) -> Rule:
    def rule(request: Any) -> Iterator[FieldViolation]:
        count = len(request.receipts) + len(request.reactions)
        if not count:
            yield FieldViolation("receipts", "give at least one receipt or reaction")
        elif count > max_batch:
            yield FieldViolation(
                "receipts", f"must hold at most {max_batch} receipts and reactions together"
            )

    return rule


def listener_id(request: Any) -> Iterator[FieldViolation]:
    """What names the listener in the leases: 1-255 visible ASCII characters."""
    value = request.listener_id
    if not value:
        yield FieldViolation("listener_id", "is required")
    elif len(value) > MAX_LISTENER_ID or not all("\x21" <= c <= "\x7e" for c in value):
        yield FieldViolation("listener_id", f"must be 1-{MAX_LISTENER_ID} visible ASCII characters")


def listen_accounts(request: Any) -> Iterator[FieldViolation]:
    ids = list(request.account_ids)
    if not ids:
        yield FieldViolation("account_ids", "give at least one account")
    elif len(ids) > MAX_LISTEN_ACCOUNTS:
        yield FieldViolation("account_ids", f"must hold at most {MAX_LISTEN_ACCOUNTS} accounts")
    elif len(set(ids)) != len(ids):
        yield FieldViolation("account_ids", "must not repeat an account")
    for i, account_id in enumerate(ids[:MAX_LISTEN_ACCOUNTS]):
        if account_id <= 0:
            yield FieldViolation(f"account_ids[{i}]", "must be an account id")


def lease_epoch(request: Any) -> Iterator[FieldViolation]:
    if request.epoch <= 0:
        yield FieldViolation("epoch", "is required: the epoch the order was offered under")


def _outcome(limits: Limits) -> Rule:
    """A report: sent with Zalo's msg_id (and its time, if known), or failed with a class (a
    rate limit with the time the account may send again)."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        kind = request.WhichOneof("outcome")
        if kind is None:
            yield FieldViolation("outcome", "give sent or failed")
        elif kind == "sent":
            sent = request.sent
            yield from _present(check_id(sent.msg_id, "sent.msg_id", required=True))
            if sent.HasField("sent_at"):
                yield from _present(
                    check_time(sent.sent_at, "sent.sent_at", datetime.now(UTC), limits)
                )
        else:
            yield from _failure(request.failed)

    return rule


def _failure(failed: Any) -> Iterator[FieldViolation]:
    if failed.failure_class not in _FAILURE_CLASSES:
        yield FieldViolation(
            "failed.failure_class",
            f"must be RETRYABLE, PERMANENT or RATE_LIMITED (got {failed.failure_class})",
        )
    if len(failed.reason) > MAX_FAILURE_REASON or "\x00" in failed.reason:
        yield FieldViolation(
            "failed.reason", f"must be at most {MAX_FAILURE_REASON} characters, without NUL"
        )
    if failed.failure_class == message_pb2.FAILURE_CLASS_RATE_LIMITED:
        if not failed.HasField("retry_at"):
            yield FieldViolation("failed.retry_at", "is required for a rate limit")
            return
        ts = failed.retry_at
        latest = datetime.now(UTC).timestamp() + MAX_RETRY_AHEAD_SECONDS
        if not 0 <= ts.nanos < 1_000_000_000 or ts.seconds < EARLIEST_SECONDS:
            yield FieldViolation("failed.retry_at", "is not a valid time")
        elif ts.seconds > latest:
            yield FieldViolation(
                "failed.retry_at", f"must be at most {MAX_RETRY_AHEAD_SECONDS} s ahead"
            )


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
_OUTBOUND = "/agora.messaging.v1.OutboundService/"
_LISTENER = "/agora.messaging.v1.ListenerService/"
_TEAM = "/agora.messaging.v1.TeamService/"
_CONVERSATIONS = "/agora.messaging.v1.ConversationService/"

_CONVERSATION = (account, zalo_id("conversation_key"))
_THREAD_PAGE = (page_limit, row_cursor("after_id", 0))

TIMELINE: RuleTable = {
    # Its `after` is any text: one that is no position of the feed is answered with a reset.
    _TIMELINE + "WatchInbox": (account,),
    _TIMELINE + "ListMessages": (
        *_CONVERSATION,
        message_page_limit,
        time_cursor("before_sent_at", "before_id"),
        time_cursor("after_sent_at", "after_id"),
        zalo_id("around_msg_id", required=False),
        one_timeline_place,
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
        inbox_filter,
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
        # Each receipt and reaction is checked by ingest itself (services/ingest/validation.py),
        # all or none.
        _INGEST + "IngestReceipts": (account, _receipts_batch(max_batch), idempotency_key),
    }


def outbound(limits: Limits) -> RuleTable:
    """OutboundService's and ListenerService's rules, with ingest's bounds. A reply's
    attachments are checked by ingest itself (JSON, as an ingested message's)."""
    return {
        _OUTBOUND + "SendMessage": (
            account,
            zalo_id("conversation_key"),
            _reply_content(limits.content_max_chars),
            zalo_id("quote_msg_id", required=False),
            required_key,
        ),
        _OUTBOUND + "RetryMessage": (account, zalo_id("cli_msg_id")),
        _OUTBOUND + "GetOrder": (account, zalo_id("cli_msg_id")),
        _LISTENER + "Listen": (listener_id, listen_accounts),
        _LISTENER + "ReportOutcome": (
            account,
            lease_epoch,
            zalo_id("cli_msg_id"),
            _outcome(limits),
        ),
    }


def agent_role(request: Any) -> Iterator[FieldViolation]:
    return _present(check_role(request.role))


def canned_reply(request: Any) -> Iterator[FieldViolation]:
    """A canned reply's shortcut and text: see services/domain/team.py."""
    yield from _present(check_shortcut(request.shortcut))
    yield from _present(check_canned_body(request.body))


# TeamService: who is on the roster and what the actor may change is the handler's (ingest
# checks the actor is an owner in the change's own transaction).
TEAM: RuleTable = {
    _TEAM + "ListAgents": (account,),
    _TEAM + "SetAgentRole": (account, row_ids("user_id", "actor_user_id"), agent_role),
    _TEAM + "RemoveAgent": (account, row_ids("user_id", "actor_user_id")),
    _TEAM + "ListAudit": (account, page_limit, row_cursor("before_id", 1)),
    _TEAM + "ListCannedReplies": (account,),
    _TEAM + "CreateCannedReply": (account, row_ids("actor_user_id"), canned_reply),
    _TEAM + "UpdateCannedReply": (account, row_ids("id", "actor_user_id"), canned_reply),
    _TEAM + "DeleteCannedReply": (account, row_ids("id", "actor_user_id")),
}


def _assignee(request: Any) -> Iterator[FieldViolation]:
    """An agent's id when given (unset: nobody); whether they are on the roster is ingest's."""
    if request.HasField("assignee_user_id"):
        yield from _present(check_row_id(request.assignee_user_id, "assignee_user_id"))


def _status_change(request: Any) -> Iterator[FieldViolation]:
    """A status; SNOOZED with a time in the future (at most MAX_SNOOZE_SECONDS ahead), the
    others without one."""
    if request.status not in _STATUSES:
        yield FieldViolation("status", "must be OPEN, RESOLVED or SNOOZED")
        return
    snoozing = request.status == message_pb2.CONVERSATION_STATUS_SNOOZED
    if not request.HasField("snoozed_until"):
        if snoozing:
            yield FieldViolation("snoozed_until", "is required to snooze (when it opens again)")
        return
    if not snoozing:
        yield FieldViolation("snoozed_until", "is given only to snooze")
        return
    ts = request.snoozed_until
    now = datetime.now(UTC).timestamp()
    if not 0 <= ts.nanos < 1_000_000_000 or ts.seconds < EARLIEST_SECONDS:
        yield FieldViolation("snoozed_until", "is not a valid time")
    elif ts.seconds + ts.nanos / 1e9 <= now:
        yield FieldViolation("snoozed_until", "must be in the future")
    elif ts.seconds > now + MAX_SNOOZE_SECONDS:
        yield FieldViolation("snoozed_until", f"must be at most {MAX_SNOOZE_SECONDS} s ahead")


CONVERSATIONS: RuleTable = {
    _CONVERSATIONS + "AssignConversation": (
        account,
        zalo_id("conversation_key"),
        _assignee,
        row_ids("actor_user_id"),
    ),
    _CONVERSATIONS + "SetConversationStatus": (
        account,
        zalo_id("conversation_key"),
        _status_change,
        row_ids("actor_user_id"),
    ),
}


def search_query(field: str) -> Rule:
    """What a person typed into a search box: see services/domain/search_text.py."""

    def rule(request: Any) -> Iterator[FieldViolation]:
        try:
            Query.parse(getattr(request, field))
        except QueryError as exc:
            yield FieldViolation(field, str(exc))

    return rule


def search_limit(request: Any) -> Iterator[FieldViolation]:
    """0 (the default page) or 1..MAX_SEARCH_LIMIT."""
    if request.limit > MAX_SEARCH_LIMIT:
        yield FieldViolation("limit", f"must be between 1 and {MAX_SEARCH_LIMIT}")


_SEARCH = "/agora.search.v1.SearchService/"

SEARCH: RuleTable = {
    _SEARCH + "SearchMessages": (
        account,
        zalo_id("conversation_key", required=False),
        search_query("query"),
        search_limit,
    ),
    _SEARCH + "SearchCourse": (
        row_ids("course_id", "user_id"),
        search_query("query"),
        search_limit,
    ),
}
