"""flusher settings."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from services.runtime.config import MessageStreamSettings, ServiceSettings


def _default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class FlusherSettings(ServiceSettings, MessageStreamSettings):
    """flusher reads REDIS_URL and MYSQL_URL (required) and the tuning below."""

    redis_url: str
    mysql_url: str
    grpc_port: int = 50054
    mysql_pool_size: int = Field(default=8, ge=1)
    # Messages per MySQL transaction (entries are never split, so one may exceed it).
    flusher_batch_max: int = Field(default=500, ge=1, le=5000)
    flusher_read_count: int = Field(default=64, ge=1)
    flusher_block_ms: int = Field(default=1000, ge=1)
    flusher_max_deliveries: int = Field(default=5, ge=1)
    flusher_lease_ttl_ms: int = Field(default=10_000, ge=1000)
    flusher_consumer_name: str = Field(default_factory=_default_consumer_name)
    # Testing only: "after_commit" kills the process between COMMIT and ACK.
    flusher_fault_point: str = ""
