"""gRPC client channels: mTLS, tracing interceptors, keepalive, and retries only where they are
safe."""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc

from services.runtime import trace_context
from services.runtime.tls import TlsMaterial


def _service_config(idempotent_services: Sequence[str]) -> str:
    # round_robin: one connection to every address the name resolves to (a headless Service's
    # pods), calls spread over them; pick_first would pin this process to one replica.
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
            "loadBalancingConfig": [{"round_robin": {}}],
            "methodConfig": [
                {"name": [{"service": name}], "retryPolicy": policy} for name in idempotent_services
            ],
        }
    )


def open_channel(
    target: str,
    *,
    tls: TlsMaterial,
    idempotent_services: Sequence[str] = (),
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """A channel to `target` that verifies the server against the CA and presents this
    workload's certificate (the server's name must be in its certificate: the host of
    `target`). `dns:///name:port` balances over every address of the name."""
    options: list[tuple[str, int | str]] = [
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", _service_config(idempotent_services)),
        # How soon a closed connection (a server's max connection age, a pod gone) may lead to a
        # new DNS lookup: new replicas are found within this plus the servers' connection age.
        ("grpc.dns_min_time_between_resolutions_ms", 5_000),
    ]
    return grpc.aio.secure_channel(
        target,
        tls.channel_credentials(),
        options=options,
        interceptors=[*trace_context.client_interceptors(), *interceptors],
    )
