"""The live watches' contract beyond the protos, shared by timeline (which serves them) and the
gateway (which forwards them as Server-Sent Events)."""

from __future__ import annotations

# The gRPC initial metadata key of the position a watch starts after (WatchInbox, WatchCourse):
# a client cut before its first event resumes from it.
POSITION_HEADER = "agora-position"

# Why a watch cannot go on from a position, by the feed's word for it: the reason a `reset`
# carries (the client refetches, then goes on from the reset's position).
RESETS = {
    "epoch": "the position is of another epoch of the feed (its history was lost since)",
    "trimmed": "the position is older than what the feed keeps",
    "ahead": "the position is ahead of the feed (its newest entries were lost)",
    "unknown": "the position is not one of the feed's",
    "malformed": "the position is not one a feed gives",
}


def reset_reason(code: str) -> str:
    return RESETS[code]
