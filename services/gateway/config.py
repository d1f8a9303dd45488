"""gateway settings."""

from __future__ import annotations

from pydantic import Field, SecretStr

from services.runtime.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    """gateway reads JWT_SECRET, the service addresses and REDIS_URL (required)."""

    # HS256 needs a key of at least 256 bits (RFC 7518 §3.2).
    jwt_secret: SecretStr = Field(min_length=32)
    ingest_addr: str
    timeline_addr: str
    likes_addr: str
    # Rate-limit counters only: the gateway keeps no other state.
    redis_url: str
    like_toggles_per_minute: int = Field(default=60, ge=1)
    # Requests in flight past this are answered 503 at once (load shedding, not timeouts).
    gateway_max_in_flight: int = Field(default=256, ge=1)
    gateway_host: str = "0.0.0.0"
    gateway_port: int = 8080
    # Deadline of every gRPC call the gateway makes on behalf of a request.
    rpc_timeout_seconds: float = Field(default=5.0, gt=0)
    # Optional audience/issuer checks for tokens minted by an identity provider.
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
