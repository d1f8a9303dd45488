"""timeline settings."""

from __future__ import annotations

from pydantic import Field

from services.runtime.config import ServiceSettings
from services.runtime.tls import MtlsSettings
from services.runtime.tokens import JwtSettings


class TimelineSettings(ServiceSettings, JwtSettings, MtlsSettings):
    """timeline reads MYSQL_URL and POSTGRES_URL (read-only users), its certificate and the
    end-user token keys from the environment."""

    mysql_url: str
    postgres_url: str
    postgres_pool_size: int = Field(default=10, ge=1)
    grpc_port: int = 50052
    grpc_health_port: int = 50062
    mysql_pool_size: int = Field(default=16, ge=1)
