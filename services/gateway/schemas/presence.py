"""JSON shapes of the presence routes (services/gateway/routes/presence.py) and of the account
stream's `presence` event (docs/presence.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from services.gateway.schemas.base import Person, RequestModel, Success


class PresenceBody(RequestModel):
    """The caller's state in the conversation of the path."""

    state: Literal["viewing", "typing", "idle"] = Field(
        description="`viewing` (repeat every ~5 s while the conversation is open and visible), "
        "`typing` (at most every ~2 s while keys are pressed), `idle` (ends it at once). A "
        "state lasts PRESENCE_TTL_SECONDS (10 s by default) unless repeated."
    )


class PresenceEntry(BaseModel):
    """One agent's state in one conversation (the caller's own included: the client filters
    itself out)."""

    conversation_key: str
    user: Person
    state: Literal["viewing", "typing", "idle"] = Field(
        description="`idle` only on the event stream, when a state ended or expired"
    )
    expires_at: str = Field(description="When the state ends unless repeated (when it ended)")


class PresenceResponse(Success):
    presence: list[PresenceEntry] = Field(
        description="The account's current states, the soonest to end first; at most "
        "PRESENCE_MAX_PER_ACCOUNT (200 by default)"
    )
