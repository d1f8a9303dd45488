"""Where the local stack listens, and a free local TCP port for a process the tests or the bench
start next to it."""

from __future__ import annotations

import os
import random
import socket

# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range starts at 32768): a port
# picked here is never handed to an outgoing connection between the pick and the server's bind,
# which is how a port from bind(0) can be taken before the process that was given it listens.
# Above the local stack's fixed ports, and below its Redis Cluster's bus ports (27001…).
_LOW, _HIGH = 20_000, 26_999
_given: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, low: int = _LOW, high: int = _HIGH, also_free: int | None = None) -> int:
    """A port nothing listens on right now and this process has not handed out before.

    `also_free` asks for `port + also_free` to be free as well (a Redis Cluster node's bus port)."""
    while True:
        port = random.randint(low, high)
        if port in _given or not _bindable(port):
            continue
        if also_free is not None and not _bindable(port + also_free):
            continue
        _given.add(port)
        return port


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
