"""Where the local stack listens, and a free local TCP port for a process the tests or the bench
start next to it."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick; a race is possible but rare)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stack_redis() -> tuple[str, bool]:
    """The local stack's Redis as the operator (`default` user) reaches it, and whether it is a
    cluster (`make up REDIS=cluster`: stack.sh run exports AGORA_REDIS_MODE and the cluster's
    REDIS_CLUSTER_URL)."""
    e = os.environ
    if e.get("AGORA_REDIS_MODE") == "cluster" and e.get("REDIS_CLUSTER_URL"):
        return e["REDIS_CLUSTER_URL"], True
    return (
        f"redis://:{e.get('REDIS_PASSWORD', '')}@127.0.0.1:{e.get('REDIS_PORT', '16379')}/0",
        False,
    )
