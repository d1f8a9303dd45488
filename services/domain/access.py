"""Who may call what: the one table of gRPC access (enforced by services/runtime/access.py).

The gateway calls what its routes use, for an end user whose verified token it forwards (only a
live feed it may watch for itself, to share among its streams);
a Zalo listener may only ingest messages, receipts and reactions, and take send orders; a watcher
may only watch the live feeds; the flusher, ingest, timeline and likes call nothing; an operator
certificate (grpcurl, tools) may ask health and, where it is on, reflection. Everything not
listed is refused with PERMISSION_DENIED.
"""

from __future__ import annotations

from dataclasses import replace

from services.runtime.access import ANYONE, AccessPolicy, Rule
from services.runtime.tokens import JwtSettings, TokenVerifier

GATEWAY = "gateway"
LISTENER = "listener"
# Internal consumers of the live feeds (an auto-reply worker, a notifier, a search indexer): they
# may watch any account or course, for no end user.
WATCHER = "watcher"

_ON_BEHALF = frozenset({GATEWAY})


def for_account(*callers: str, user_field: str | None = None) -> Rule:
    """`callers` may call; the gateway only for a user whose token grants the request's
    account_id (and, with `user_field`, whose id that field is)."""
    return Rule(
        frozenset(callers), on_behalf=_ON_BEHALF, account_field="account_id", user_field=user_field
    )


def for_user(*callers: str) -> Rule:
    """`callers` may call; the gateway only with the request's user_id being the token's user."""
    return Rule(frozenset(callers), on_behalf=_ON_BEHALF, user_field="user_id")


def watching(rule: Rule) -> Rule:
    """`rule`, for a live feed: the gateway may also watch for itself, for no end user. It
    holds one watch of a feed per process, shared by its browsers' streams, and checks each
    stream itself (the token's expiry and accounts, the enrolment). Not scoped: the gateway's
    certificate alone may watch every account and course, as a watcher's may (docs/security.md,
    "Out of scope")."""
    return replace(rule, end_user_optional=True)


RULES: dict[str, Rule] = {
    # Listeners forward what Zalo delivers; the gateway's batch route does it for a user.
    "/agora.messaging.v1.IngestService/IngestMessages": for_account(LISTENER, GATEWAY),
    "/agora.messaging.v1.IngestService/MarkRead": for_account(GATEWAY),
    "/agora.messaging.v1.IngestService/RecordAgentSent": for_account(
        GATEWAY, user_field="agent_user_id"
    ),
    # Listeners forward receipts and reactions as they forward messages.
    "/agora.messaging.v1.IngestService/IngestReceipts": for_account(LISTENER),
    # Replies: the gateway queues them for its user, the sender; the account's listener takes
    # them (its certificate alone: a listener serves no end user).
    "/agora.messaging.v1.OutboundService/SendMessage": for_account(
        GATEWAY, user_field="agent_user_id"
    ),
    "/agora.messaging.v1.OutboundService/*": for_account(GATEWAY),
    "/agora.messaging.v1.ListenerService/*": Rule(frozenset({LISTENER})),
    # The team of an account: read by any user the token grants it to; changed as the token's
    # user (actor_user_id), whom ingest then checks is an owner of the account.
    "/agora.messaging.v1.TeamService/SetAgentRole": for_account(
        GATEWAY, user_field="actor_user_id"
    ),
    "/agora.messaging.v1.TeamService/RemoveAgent": for_account(GATEWAY, user_field="actor_user_id"),
    "/agora.messaging.v1.TeamService/CreateCannedReply": for_account(
        GATEWAY, user_field="actor_user_id"
    ),
    "/agora.messaging.v1.TeamService/UpdateCannedReply": for_account(
        GATEWAY, user_field="actor_user_id"
    ),
    "/agora.messaging.v1.TeamService/DeleteCannedReply": for_account(
        GATEWAY, user_field="actor_user_id"
    ),
    "/agora.messaging.v1.TeamService/*": for_account(GATEWAY),
    # The team's changes to a conversation: the gateway, for its user, who is the audit's actor.
    "/agora.messaging.v1.ConversationService/*": for_account(GATEWAY, user_field="actor_user_id"),
    "/agora.messaging.v1.TimelineService/*": for_account(GATEWAY),
    "/agora.messaging.v1.TimelineService/WatchInbox": watching(for_account(GATEWAY, WATCHER)),
    "/agora.forum.v1.ForumWriteService/*": for_user(GATEWAY),
    "/agora.forum.v1.ForumReadService/*": for_user(GATEWAY),
    "/agora.forum.v1.ForumReadService/WatchCourse": watching(for_user(GATEWAY, WATCHER)),
    "/agora.forum.v1.LikeService/*": for_user(GATEWAY),
    "/agora.search.v1.SearchService/SearchMessages": for_account(GATEWAY),
    "/agora.search.v1.SearchService/SearchCourse": for_user(GATEWAY),
    "/grpc.health.v1.Health/*": Rule(frozenset({ANYONE})),
    # Registered only where GRPC_REFLECTION is on.
    "/grpc.reflection.v1alpha.ServerReflection/*": Rule(frozenset({ANYONE})),
    "/grpc.reflection.v1.ServerReflection/*": Rule(frozenset({ANYONE})),
}


def policy(settings: JwtSettings) -> AccessPolicy:
    """The table, with the verifier of the end-user tokens the gateway forwards."""
    return AccessPolicy(RULES, TokenVerifier.from_settings(settings))
