"""likes settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from services.runtime.grpc_server import ApiServiceSettings
from services.runtime.tokens import JwtSettings
from services.streams.likes import LikeStreamSettings
from services.streams.live import LiveSettings

# How likes are kept (docs/likes.md).
LikesMode = Literal["buffered", "sync", "counterless"]


class LikesSettings(ApiServiceSettings, LikeStreamSettings, LiveSettings, JwtSettings):
    """likes reads POSTGRES_URL (read-only role) and, by mode, REDIS_URL or POSTGRES_WRITE_URL;
    its certificate, the end-user token keys and the live feeds' layout (a sync pod publishes
    the like counts it commits)."""

    # buffered (the default): Redis SET + Lua + stream, the flusher writes batches.
    # sync: one INSERT … ON CONFLICT DO NOTHING RETURNING statement per like.
    # counterless (the hot-post emergency switch): the insert without the counter UPDATE; the
    # flusher's reconciliation recounts the targets it marks dirty (RECONCILE_INTERVAL_SECONDS=5).
    # sync uses REDIS_URL too when it is set (every deployment here sets it): only then may it
    # serve next to buffered pods (a mode switch).
    likes_mode: LikesMode = "buffered"
    postgres_url: str
    redis_url: str | None = None
    postgres_write_url: str | None = None
    grpc_port: int = 50053
    grpc_health_port: int = 50063
    postgres_pool_size: int = Field(default=10, ge=1)
    # CPU-bound per call (TLS, token, Lua round trip): one process per core by default.
    workers: int = Field(default=0, ge=0)
    # A user's liked SET lives this long after their last toggle (7 days).
    liked_set_ttl_seconds: int = Field(default=604_800, ge=60)
    # Unflushed like events the streams may hold (split evenly over the shards); past it a
    # toggle is refused (RESOURCE_EXHAUSTED), so a stopped flusher cannot fill Redis.
    like_queue_max: int = Field(default=200_000, ge=1)
    like_queue_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    # Pods of two modes may serve the same users while LIKES_MODE is switched (docs/likes.md,
    # "Switching modes"): a sync or counterless toggle waits this long for the user's buffered
    # toggle of the same target to be flushed, a buffered one for a direct write of the user to
    # finish; then UNAVAILABLE (retry), nothing changed. Below the gateway's RPC deadline.
    like_pending_wait_seconds: float = Field(default=2.0, gt=0, le=60)
    # buffered and counterless: how long this process trusts what it cached about a course (its
    # members, its targets' liveness) without asking PostgreSQL again; 0 asks on every like. A
    # change signalled on the course's access-version key (see docs/likes.md) drops it at once.
    access_cache_seconds: float = Field(default=30, ge=0, le=300)
    # Bounds of that cache: courses, member ids over all cached courses, targets.
    access_cache_courses: int = Field(default=10_000, ge=1)
    access_cache_members: int = Field(default=4_000_000, ge=1)
    access_cache_targets: int = Field(default=100_000, ge=1)

    @model_validator(mode="after")
    def _mode_needs(self) -> LikesSettings:
        if self.likes_mode == "buffered" and not self.redis_url:
            raise ValueError("REDIS_URL is required when LIKES_MODE=buffered")
        if self.likes_mode in ("sync", "counterless") and not self.postgres_write_url:
            raise ValueError(f"POSTGRES_WRITE_URL is required when LIKES_MODE={self.likes_mode}")
        if self.likes_mode == "counterless" and not self.redis_url:
            raise ValueError("REDIS_URL is required when LIKES_MODE=counterless (dirty targets)")
        return self
