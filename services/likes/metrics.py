"""Metrics of the likes service beyond the gRPC ones every service has."""

from __future__ import annotations

from prometheus_client import Counter

# A toggle that had to wait for a pod of another mode (a LIKES_MODE switch, docs/likes.md): side
# "direct" waited for the user's unflushed buffered toggle of the target, side "buffered" for a
# direct write of the user; outcome "done" or "gave_up" (answered UNAVAILABLE).
ORDER_WAITS = Counter(
    "agora_like_order_waits",
    "Toggles that waited for another mode's write of the same user",
    ["side", "outcome"],
)
