"""The live watches' contract beyond the protos, shared by timeline (which serves them) and the
gateway (which forwards them as Server-Sent Events)."""

from __future__ import annotations

# The gRPC initial metadata key of the position a watch starts after (WatchInbox, WatchCourse):
# a client cut before its first event resumes from it.
POSITION_HEADER = "agora-position"
