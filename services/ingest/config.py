"""ingest settings."""

from __future__ import annotations

from pydantic import Field

from services.domain.instants import Limits
from services.runtime.grpc_server import ApiServiceSettings
from services.runtime.tokens import JwtSettings
from services.streams.likes import LikeStreamSettings
from services.streams.live import LiveSettings
from services.streams.messages import MessageStreamSettings


class IngestSettings(
    ApiServiceSettings, MessageStreamSettings, LikeStreamSettings, LiveSettings, JwtSettings
):
    """ingest reads REDIS_URL, POSTGRES_URL and MYSQL_URL (required), its certificate, the
    end-user token keys, the live feeds' layout (its forum writes add to the courses' feeds) and
    the limits below."""

    redis_url: str
    postgres_url: str
    postgres_pool_size: int = Field(default=10, ge=1)
    # zalo_accounts (SELECT: a call for an account it does not hold is refused at once,
    # services/ingest/accounts.py; known accounts are cached) and the replies' orders and leases
    # (services/ingest/outbound/): a few statements per reply, so the pool stays small.
    mysql_url: str
    mysql_pool_size: int = Field(default=2, ge=1)
    # A known account is re-checked in the background this often (a deleted one is refused
    # within about this long), an unknown one is remembered this long (a new one is accepted
    # within it).
    account_cache_known_seconds: float = Field(default=60.0, gt=0)
    account_cache_unknown_seconds: float = Field(default=2.0, ge=0)
    # Chat ingest (listeners and the gateway).
    grpc_port: int = 50051
    # A listener's Listen stream holds its leases: a connection closed for its age
    # (GRPC_MAX_CONNECTION_AGE_SECONDS) keeps it this long instead of cutting it (each cut
    # re-offers the orders in flight as possibly sent). A frozen listener is found by the
    # keepalive pings (GRPC_KEEPALIVE_SECONDS), not by this.
    grpc_max_connection_age_grace_seconds: float | None = Field(default=900.0, ge=0)
    # Forum writes, on their own listener so that only the gateway can reach them.
    grpc_forum_port: int = 50055
    # How long after writing it an author may edit their post or comment (a course's teachers
    # may edit at any time). A day: time to fix a typo or add what was forgotten, not to rewrite
    # a question after it was answered.
    forum_edit_window_seconds: int = Field(default=86_400, ge=0, le=10 * 365 * 86_400)
    grpc_health_port: int = 50061
    # The backlog must ride out an outage: >= peak msg/s * outage seconds; 500 msg/s * 300 s here.
    message_queue_max: int = Field(default=150_000, ge=1)
    # The same bound in bytes (what Redis memory is made of): messages vary from 100 bytes to
    # hundreds of kilobytes with their JSON documents.
    message_queue_max_bytes: int = Field(default=512 * 1024 * 1024, ge=1024)
    # Fair shares of a stream shard: past this fraction of its bound (messages or bytes) the shard
    # is under pressure and refuses, first, an account sending more than MESSAGE_QUEUE_ACCOUNT_SHARE
    # times the typical rate of the shard's other accounts (1: never; the bound alone refuses).
    message_queue_pressure: float = Field(default=0.5, gt=0, le=1)
    message_queue_account_share: float = Field(default=4.0, ge=1)
    # How fast those per-account rates forget what an account sent.
    message_queue_rate_half_life_seconds: float = Field(default=10.0, gt=0, le=3600)
    ingest_max_batch: int = Field(default=500, ge=1, le=10_000)
    content_max_chars: int = Field(default=65_535, ge=1)
    json_max_bytes: int = Field(default=65_536, ge=2)
    # Listener clocks drift; anything later than this past the server's clock is rejected.
    sent_at_max_future_seconds: int = Field(default=300, ge=0)
    # Replies (services/ingest/outbound/): at most this many send orders offered per account per
    # second (more wait their turn, none is dropped): Zalo limits how fast an account sends.
    outbound_sends_per_second: float = Field(default=5.0, gt=0, le=1000)
    # A listener's lease of an account lasts this long unless its stream renews it (a third of
    # it, while the stream is open): a listener that vanished without closing its stream gives
    # the account up after at most this long.
    outbound_lease_seconds: float = Field(default=15.0, ge=1, le=3600)
    # How often an open stream looks for orders it was not woken for (queued by another ingest
    # process, a backoff that ran out).
    outbound_poll_ms: int = Field(default=500, ge=10, le=60_000)
    # How often a stream asks again for an account another listener holds.
    outbound_lease_retry_ms: int = Field(default=2000, ge=10, le=60_000)

    def limits(self) -> Limits:
        """The bounds of what ingest stores, as its checks take them."""
        return Limits(
            content_max_chars=self.content_max_chars,
            json_max_bytes=self.json_max_bytes,
            sent_at_max_future_seconds=self.sent_at_max_future_seconds,
        )
