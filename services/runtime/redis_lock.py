"""Owned locks in Redis: only the holder that took a lock can extend or release it."""

from __future__ import annotations

import secrets

import redis.asyncio as redis

# Compare-and-act on the holder's token, so a holder whose lock expired (and was taken by someone
# else) can neither extend nor release the new holder's lock.
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLocks:
    """Acquire, extend and release owned locks (SET NX PX with a holder token)."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._extend = client.register_script(_EXTEND)
        self._release = client.register_script(_RELEASE)

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(12)

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._redis.set(key, token, nx=True, px=ttl_ms))

    async def extend(self, key: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._extend(keys=[key], args=[token, ttl_ms]))

    async def release(self, key: str, token: str) -> bool:
        return bool(await self._release(keys=[key], args=[token]))
