"""timeline settings."""

from __future__ import annotations

from pydantic import Field

from services.runtime.grpc_server import ApiServiceSettings
from services.runtime.tokens import JwtSettings
from services.streams.live import LiveSettings


class TimelineSettings(ApiServiceSettings, JwtSettings, LiveSettings):
    """timeline reads MYSQL_URL and POSTGRES_URL (read-only users), REDIS_URL (the live feeds,
    read-only), its certificate and the end-user token keys from the environment."""

    mysql_url: str
    postgres_url: str
    redis_url: str
    # A watcher looks at its feed at least this often even when no wake-up came (a lost one).
    live_poll_seconds: float = Field(default=30.0, gt=0, le=3600)
    # How often a watch checks that its caller may still watch (the enrolment, the account).
    live_recheck_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Watches this process holds at most; beyond, a new one is refused UNAVAILABLE (the caller
    # retries, on another replica) instead of the process running out of memory.
    live_max_watches: int = Field(default=20_000, ge=1)
    # A watch ends after between half of this and all of it (UNAVAILABLE: the caller resumes
    # from its last position, on whichever replica its balancer picks): watches spread over the
    # replicas as connections do, one at a time instead of a connection's thousands at once.
    live_max_watch_seconds: float = Field(default=600.0, gt=0)
    # Longer than any watch lasts: a connection closed for its age (GRPC_MAX_CONNECTION_AGE_
    # SECONDS) keeps its watches until each ends on its own, instead of cutting them all.
    grpc_max_connection_age_grace_seconds: float | None = Field(default=900.0, ge=0)
    postgres_pool_size: int = Field(default=10, ge=1)
    grpc_port: int = 50052
    grpc_health_port: int = 50062
    mysql_pool_size: int = Field(default=16, ge=1)
