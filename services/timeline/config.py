"""timeline settings."""

from __future__ import annotations

from pydantic import Field

from services.runtime.config import ServiceSettings
from services.runtime.tls import MtlsSettings
from services.runtime.tokens import JwtSettings
from services.streams.live import LiveSettings


class TimelineSettings(ServiceSettings, JwtSettings, MtlsSettings, LiveSettings):
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
    postgres_pool_size: int = Field(default=10, ge=1)
    grpc_port: int = 50052
    grpc_health_port: int = 50062
    mysql_pool_size: int = Field(default=16, ge=1)
