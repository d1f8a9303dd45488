"""gRPC client channels: tracing interceptors, keepalive, and retries only where they are safe."""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors


def _service_config(idempotent_services: Sequence[str]) -> str:
    # Retries are declared per service here, never hand-rolled in callers: only read-only or
    # idempotent services are listed, and only UNAVAILABLE (nothing was processed) is retried.
    policy = {
        "maxAttempts": 3,
        "initialBackoff": "0.05s",
        "maxBackoff": "0.5s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    return json.dumps(
        {
            "methodConfig": [
                {"name": [{"service": name}], "retryPolicy": policy} for name in idempotent_services
            ]
        }
    )


def open_channel(target: str, *, idempotent_services: Sequence[str] = ()) -> grpc.aio.Channel:
    """An insecure channel to `target` (in-cluster traffic; mTLS belongs to the mesh)."""
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ("grpc.enable_retries", 1),
    ]
    if idempotent_services:
        options.append(("grpc.service_config", _service_config(idempotent_services)))
    return grpc.aio.insecure_channel(
        target, options=options, interceptors=aio_client_interceptors()
    )
