"""gateway settings."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from services.runtime.config import ServiceSettings
from services.runtime.tls import MtlsSettings
from services.runtime.tokens import JwtSettings

KIB = 1024
MIB = 1024 * KIB
# scheme://host[:port], as a browser sends it in Origin (no path, no trailing slash).
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


class GatewaySettings(ServiceSettings, JwtSettings, MtlsSettings):
    """gateway reads a token key (JWT_KEYS, JWT_SECRET or JWT_SECRET_FILE), its certificate
    (GRPC_TLS_CA, GRPC_TLS_CERT, GRPC_TLS_KEY), the service addresses and REDIS_URL (required);
    see services/runtime/tokens.py and services/runtime/tls.py."""

    ingest_addr: str
    # ingest's forum write listener (its own port, reachable only from the gateway).
    ingest_forum_addr: str
    timeline_addr: str
    likes_addr: str
    # Rate-limit counters, stream leases and presence: the gateway keeps no other state.
    redis_url: str
    # Writes a user makes, per minute (services/gateway/rate_limit.py): past one, 429.
    like_toggles_per_minute: int = Field(default=60, ge=1)
    forum_writes_per_minute: int = Field(default=30, ge=1)
    # The batch ingest route, per account and per user (a forwarder's token holds many
    # accounts): each call carries up to 500 messages.
    ingest_calls_per_minute_per_account: int = Field(default=600, ge=1)
    ingest_calls_per_minute_per_user: int = Field(default=6000, ge=1)
    inbox_writes_per_minute: int = Field(default=600, ge=1)
    # Presence (services/gateway/presence.py): how long a "viewing" or "typing" lasts unless
    # repeated, how many entries an account holds at most (the soonest to end dropped first),
    # and the writes a user makes a minute (viewing every ~5 s and typing every ~2 s in one
    # conversation is 42; several tabs and conversations fit).
    presence_ttl_seconds: float = Field(default=10.0, ge=1, le=300)
    presence_max_per_account: int = Field(default=200, ge=1, le=10_000)
    presence_writes_per_minute: int = Field(default=120, ge=1)
    # Requests in flight past this are answered 503 at once (load shedding, not timeouts). Event
    # streams do not count: they have bounds of their own.
    gateway_max_in_flight: int = Field(default=256, ge=1)
    # Server-Sent Event streams (…/events) this process holds in all, and a user holds across
    # every gateway process and replica (counted in Redis, each stream a lease renewed by its
    # process: a killed gateway's streams count until their leases end); past either a new one
    # is answered 503 with Retry-After.
    live_streams_per_process: int = Field(default=20_000, ge=1)
    live_streams_per_user: int = Field(default=16, ge=1)
    live_stream_lease_seconds: float = Field(default=90.0, ge=3)
    # A comment this often keeps proxies from closing an idle stream.
    live_heartbeat_seconds: float = Field(default=15.0, gt=0)
    # A client that has not taken an event within this is disconnected (it resumes) instead of
    # having its events buffered without bound.
    live_send_timeout_seconds: float = Field(default=10.0, gt=0)
    # The reconnection delay the stream tells browsers (retry:).
    live_retry_ms: int = Field(default=2000, ge=100)
    # How often a course stream asks whether its user is still enrolled (an inbox stream's
    # account is in its token, which it outlives by no second).
    live_recheck_seconds: float = Field(default=30.0, gt=0, le=3600)
    # The bytes of events each followed feed keeps for its live streams a little behind (one
    # further behind reads a watch of its own until it gets there), and all of them together
    # in this process: bytes, not events, since an event is up to LIVE_MAX_EVENT_BYTES.
    live_window_bytes_per_feed: int = Field(default=256 * 1024, ge=4096)
    live_window_bytes: int = Field(default=32 * 1024 * 1024, ge=65_536)
    gateway_host: str = "0.0.0.0"
    gateway_port: int = 8080
    # HTTP parsing and JSON are CPU-bound: one process per core by default (WORKERS).
    workers: int = Field(default=0, ge=0)
    # Connections to each upstream listener, requests taking them in turn: a service running
    # several worker processes behind one port gets as many connections to spread (the kernel
    # gives each connection to one worker), so keep this at least its worker count.
    gateway_upstream_connections: int = Field(default=4, ge=1)
    # Deadline of every gRPC call the gateway makes on behalf of a request.
    rpc_timeout_seconds: float = Field(default=5.0, gt=0)
    # Every body but a batch. The largest valid one is an agent-sent record: ingest accepts
    # 65,535 characters of content, up to 4 bytes each in UTF-8 and 12 as JSON \u escapes
    # (a surrogate pair), so ~770 KiB at worst; 64 KiB would refuse valid messages and posts.
    gateway_max_body_bytes: int = Field(default=1 * MIB, ge=1)
    # POST /api/zalo-accounts/{id}/messages. 500 messages of the largest size ingest accepts
    # weigh ~157 MiB as ASCII (64 KiB of content and four 64 KiB JSON fields each), but the batch
    # travels to ingest as one gRPC message of at most 16 MiB (services/runtime/grpc_client.py),
    # and JSON carries the same text plus field names, quotes and escapes: a body past 16 MiB
    # could not be forwarded anyway. A typical batch of 500 is well under 1 MiB.
    gateway_max_batch_body_bytes: int = Field(default=16 * MIB, ge=1)
    # The whole body must arrive within this; a slower client gets 408 (and held no slot).
    gateway_body_timeout_seconds: float = Field(default=10.0, gt=0)
    # Origins browsers may call the API from (comma separated); none: no cross-origin access.
    gateway_cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    # Strict-Transport-Security max-age; 0 (not sent) unless the gateway is reached over TLS.
    gateway_hsts_seconds: int = Field(default=0, ge=0)

    @field_validator("gateway_cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(o.strip() for o in value.split(",") if o.strip())
        if isinstance(value, list | tuple):
            for origin in value:
                # "*" would be every site: the allowlist names each web client.
                if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin):
                    raise ValueError(f"{origin!r} is not an origin like https://app.example.com")
        return value
