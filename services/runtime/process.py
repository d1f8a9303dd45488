"""How every service process runs its async main: on uvloop.

grpc.aio, asyncpg, aiomysql, redis-py and uvicorn all run on it; the faster loop and socket
transports are worth ~5-10% more requests per core on the hot paths (bench/likes_hot.py).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import uvloop


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(main())
