"""timeline settings."""

from __future__ import annotations

from pydantic import Field

from services.runtime.config import ServiceSettings


class TimelineSettings(ServiceSettings):
    """timeline reads MYSQL_URL and POSTGRES_URL (read-only users) from the environment."""

    mysql_url: str
    postgres_url: str
    postgres_pool_size: int = Field(default=10, ge=1)
    grpc_port: int = 50052
    mysql_pool_size: int = Field(default=16, ge=1)
