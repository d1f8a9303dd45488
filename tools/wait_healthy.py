"""Wait until every given endpoint is healthy: grpc:HOST:PORT (standard health) or an http URL."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tools.waiting import NeverHappened, until


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
    pending = list(endpoints)

    async def all_healthy() -> bool:
        nonlocal pending
        pending = [e for e in pending if not await healthy(e)]
        return not pending

    with contextlib.suppress(NeverHappened):
        await until("every endpoint to be healthy", all_healthy, seconds, every=0.3)
    return pending


async def healthy(endpoint: str) -> bool:
    if endpoint.startswith("grpc:"):
        return await grpc_serving(endpoint.removeprefix("grpc:"))
    return await asyncio.to_thread(http_ok, endpoint)


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
