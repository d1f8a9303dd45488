"""Presence routes: an agent says it is viewing or typing in a conversation (or no longer is),
and reads who is, in an account (docs/presence.md). The account's event stream carries each
change as a `presence` event (routes/live.py).

The agent is the token's user, named by the token's `name` claim: the gateway has no PostgreSQL
pool to read the people directory, and a presence entry only ever names the bearer of the token
that wrote it, so the token is where its name is. The name is kept in the entry (read back by
GET, carried by the events) and null when the token carries none.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from services.domain.people import display_name
from services.gateway import schemas
from services.gateway.auth import CurrentUser, Principal, require_account
from services.gateway.convert import JsonBytes, ok
from services.gateway.params import AccountId
from services.gateway.presence import Presence
from services.gateway.rate_limit import PRESENCE_WRITE
from services.gateway.routes.messaging import ConversationKeyPath

router = APIRouter(prefix="/api/zalo-accounts/{account_id}", tags=["presence"])


def _presence(request: Request) -> Presence:
    presence: Presence = request.app.state.presence
    return presence


def _name(user: Principal) -> str | None:
    """The token's name as the people directory would keep it, or None."""
    if user.name is None:
        return None
    try:
        return display_name(user.name)
    except ValueError:
        return None


@router.put(
    "/conversations/{conversation_key}/presence",
    summary="Say the caller is viewing or typing in the conversation, or no longer is",
    description="`viewing` and `typing` last PRESENCE_TTL_SECONDS (10 s by default) unless "
    "repeated; `idle` ends the caller's state in the conversation at once. The account's other "
    "agents see it on the account's event stream (`presence` events) and in GET …/presence. "
    "Nothing is stored beyond the state's length: an account holds at most "
    "PRESENCE_MAX_PER_ACCOUNT (200) states, the soonest to end dropped first.",
    status_code=204,
    response_class=Response,
    dependencies=[PRESENCE_WRITE],
)
async def put_presence(
    request: Request,
    user: CurrentUser,
    account_id: AccountId,
    conversation_key: ConversationKeyPath,
    body: schemas.PresenceBody,
) -> Response:
    require_account(user, account_id)
    await _presence(request).put(
        account_id, conversation_key, user.user_id, _name(user), body.state
    )
    return Response(status_code=204)


@router.get(
    "/presence",
    summary="Who is viewing or typing in which conversation of the account, now",
    description="Every current state of the account (the caller's own included: the client "
    "filters itself out), the soonest to end first. What changes next comes on the account's "
    "event stream as `presence` events.",
    response_model=schemas.PresenceResponse,
)
async def get_presence(request: Request, user: CurrentUser, account_id: AccountId) -> JsonBytes:
    require_account(user, account_id)
    entries = await _presence(request).current(account_id)
    return ok({"presence": [entry.json() for entry in entries]})
