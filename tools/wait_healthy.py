"""Wait until every given endpoint is healthy: grpc:HOST:PORT (standard health) or an http URL."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


async def grpc_serving(target: str) -> bool:
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (local URL)
            return bool(response.status == 200)
    except OSError:
        return False


async def wait(endpoints: list[str], seconds: float) -> list[str]:
    """The endpoints still unhealthy when the timeout passed (empty when all are healthy)."""
    deadline = time.monotonic() + seconds
    pending = list(endpoints)
    while pending and time.monotonic() < deadline:
        still = []
        for endpoint in pending:
            healthy = (
                await grpc_serving(endpoint.removeprefix("grpc:"))
                if endpoint.startswith("grpc:")
                else await asyncio.to_thread(http_ok, endpoint)
            )
            if not healthy:
                still.append(endpoint)
        pending = still
        if pending:
            await asyncio.sleep(0.3)
    return pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("endpoints", nargs="+")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    unhealthy = asyncio.run(wait(args.endpoints, args.timeout))
    if unhealthy:
        sys.exit("not healthy: " + ", ".join(unhealthy))


if __name__ == "__main__":
    main()
