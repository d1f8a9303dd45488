"""Replicas that take load: a client balances over every address a name resolves to (round_robin
over a headless Service's pods), and finds a replica that joins once servers close connections
at their max age. Three real timeline processes share one name and port on 127.0.0.1-3, as pods
share a headless Service; a small DNS server plays the cluster DNS."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agora.messaging.v1 import timeline_service_pb2 as pb
from agora.messaging.v1 import timeline_service_pb2_grpc
from dnslib import QTYPE, RR, A
from dnslib.server import BaseResolver, DNSServer

from services.runtime.grpc_client import open_channel
from tests.deploy.grpc_metrics import requests_served
from tests.helpers import ROOT
from tests.stack import Env
from tools import callers, certs
from tools.ports import free_port
from tools.wait_healthy import wait
from tools.waiting import until

pytestmark = pytest.mark.asyncio
NAME = "timeline.agora.test"
METHOD = "/agora.messaging.v1.TimelineService/ListConversations"


@dataclass
class Zone(BaseResolver):  # type: ignore[misc]
    """Answers A queries for NAME with `addresses` (TTL 1 s, as a headless Service's records)."""

    addresses: list[str] = field(default_factory=list)

    def resolve(self, request: Any, handler: Any) -> Any:
        reply = request.reply()
        question = request.q
        if str(question.qname).rstrip(".") == NAME and question.qtype == QTYPE.A:
            for address in self.addresses:
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=1))
        return reply


@pytest.fixture
def dns() -> Iterator[tuple[Zone, int]]:
    zone = Zone()
    port = free_port()
    server = DNSServer(zone, port=port, address="127.0.0.1")
    server.start_thread()
    try:
        yield zone, port
    finally:
        server.stop()


@dataclass
class Replica:
    address: str
    health_port: int
    metrics_port: int
    process: asyncio.subprocess.Process

    def served(self) -> float:
        return requests_served(self.metrics_port, METHOD)


@asynccontextmanager
async def replicas(env: Env, tls: Path, port: int) -> AsyncIterator[Any]:
    """Starts timeline replicas on 127.0.0.<n>:`port` on demand; stops them all at the end."""
    started: list[Replica] = []

    async def start(n: int) -> Replica:
        replica = Replica(f"127.0.0.{n}", free_port(), free_port(), None)  # type: ignore[arg-type]
        replica.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.timeline",
            cwd=ROOT,
            env={
                **os.environ,
                **callers.tls_env("timeline"),
                "GRPC_TLS_CERT": str(tls / "timeline.pem"),
                "GRPC_TLS_KEY": str(tls / "timeline.key"),
                "JWT_SECRET": env.jwt_secret,
                "MYSQL_URL": env.mysql_timeline_url,
                "POSTGRES_URL": env.pg_timeline_url,
                "REDIS_URL": env.redis_timeline_url,
                "GRPC_HOST": replica.address,
                "GRPC_PORT": str(port),
                "GRPC_HEALTH_PORT": str(replica.health_port),
                "METRICS_PORT": str(replica.metrics_port),
                "GRPC_MAX_CONNECTION_AGE_SECONDS": "2",
                "GRPC_GRACE_SECONDS": "1",
                "OTEL_TRACES_EXPORTER": "none",
            },
        )
        started.append(replica)
        assert not await wait([f"grpc:{replica.address}:{replica.health_port}"], 30)
        return replica

    try:
        yield start
    finally:
        for replica in started:
            if replica.process.returncode is None:
                replica.process.send_signal(signal.SIGTERM)
        for replica in started:
            await asyncio.wait_for(replica.process.wait(), 30)


def shares(replicas: list[Replica], before: list[float]) -> list[float]:
    return [r.served() - b for r, b in zip(replicas, before, strict=True)]


async def test_calls_spread_over_every_replica_and_one_that_joins(
    env: Env, dns: tuple[Zone, int], tmp_path: Path
) -> None:
    zone, dns_port = dns
    # The replicas' certificate names the Service, as cert-manager's dnsNames do in the cluster.
    certs.issue(certs.load_authority(callers.tls_dir()), "timeline", tmp_path, hosts=(NAME,))
    port = free_port()
    async with replicas(env, tmp_path, port) as start:
        pods = [await start(n) for n in (1, 2, 3)]
        zone.addresses = [p.address for p in pods]
        channel = open_channel(
            f"dns://127.0.0.1:{dns_port}/{NAME}:{port}",
            tls=callers.material("gateway"),
            interceptors=[callers.ForwardUser(env.jwt_secret)],
        )
        async with channel:
            stub = timeline_service_pb2_grpc.TimelineServiceStub(channel)
            request = pb.ListConversationsRequest(account_id=1, limit=5)
            before = [p.served() for p in pods]
            for _ in range(90):
                await stub.ListConversations(request, timeout=5)
            spread = shares(pods, before)
            assert sum(spread) == 90
            assert min(spread) >= 15, f"calls per replica: {spread}"

            # A fourth replica joins (the autoscaler): servers close connections at their max age,
            # the client resolves again and includes it.
            pods.append(await start(4))
            zone.addresses = [p.address for p in pods]

            async def the_new_replica_served() -> bool:
                if pods[3].served() > 0:
                    return True
                await stub.ListConversations(request, timeout=5)
                return False

            await until("the new replica to get a call", the_new_replica_served, 30, every=0.05)
            before = [p.served() for p in pods]
            for _ in range(80):
                await stub.ListConversations(request, timeout=5)
            spread = shares(pods, before)
            assert min(spread) >= 10, f"calls per replica after one joined: {spread}"
