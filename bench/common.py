"""Shared bench plumbing: where the local stack is, timing statistics, result rows."""

from __future__ import annotations

import os
import statistics
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tools import callers
from tools.callers import tls_dir
from tools.jwt_token import secret_file

ROOT = Path(__file__).resolve().parents[1]
BENCH_ACCOUNT = 900_001  # the timeline data set
E2E_ACCOUNT = 900_002  # end-to-end ingest runs


def scrape(port: int) -> list[Metric]:
    """The metric families a local service serves on its METRICS_PORT."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return list(text_string_to_metric_families(response.read().decode()))


def metric_total(families: list[Metric], name: str) -> float:
    """The sum of every series of sample `name` (all label sets)."""
    return sum(s.value for f in families for s in f.samples if s.name == name)


def histogram_buckets(families: list[Metric], histogram: str) -> list[tuple[float, float]]:
    """A histogram as (upper bound, cumulative count), in bucket order."""
    return [
        (float(s.labels["le"]), s.value)
        for f in families
        for s in f.samples
        if s.name == f"{histogram}_bucket"
    ]


@dataclass(frozen=True)
class Stack:
    """Addresses and credentials of the running local stack (from deploy/local/stack.env)."""

    mysql_admin_url: str
    # The timeline's SELECT-only user over TLS, exactly as the service connects (timeline.env).
    mysql_timeline_url: str
    mysql_bench_url: str
    # The timeline's read role through PgBouncer, as the service connects (timeline.env); the
    # service runs without a statement cache there (POSTGRES_STATEMENT_CACHE_SIZE=0).
    pg_timeline_url: str
    # The same role straight to PostgreSQL (no PgBouncer): what the query costs without the pooler.
    pg_timeline_direct_url: str
    pg_admin_url: str
    likes_addr: str
    redis_url: str
    ingest_addr: str
    timeline_addr: str
    gateway_port: int

    @classmethod
    def from_env(cls) -> Stack:
        e = os.environ
        mysql = f"127.0.0.1:{e['MYSQL_PORT']}"
        return cls(
            mysql_admin_url=f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@{mysql}/agora",
            mysql_timeline_url=(
                f"mysql://agora_timeline:{e['MYSQL_TIMELINE_PASSWORD']}@{mysql}/agora"
                f"?ssl_ca={tls_dir() / 'ca.pem'}"
            ),
            mysql_bench_url=f"mysql://agora_migrator:{e['MYSQL_MIGRATOR_PASSWORD']}@{mysql}/agora_bench",
            pg_timeline_url=(
                f"postgresql://agora_timeline:{e['PG_TIMELINE_PASSWORD']}"
                f"@127.0.0.1:{e['PGBOUNCER_PORT']}/agora"
            ),
            pg_timeline_direct_url=(
                f"postgresql://agora_timeline:{e['PG_TIMELINE_PASSWORD']}"
                f"@127.0.0.1:{e['PG_PORT']}/agora"
            ),
            pg_admin_url=(
                f"postgresql://agora_migrator:{e['PG_MIGRATOR_PASSWORD']}"
                f"@127.0.0.1:{e['PG_PORT']}/agora"
            ),
            likes_addr=f"127.0.0.1:{e['LIKES_PORT']}",
            redis_url=f"redis://:{e['REDIS_PASSWORD']}@127.0.0.1:{e['REDIS_PORT']}/0",
            ingest_addr=f"127.0.0.1:{e['INGEST_PORT']}",
            timeline_addr=f"127.0.0.1:{e['TIMELINE_PORT']}",
            gateway_port=int(e["GATEWAY_PORT"]),
        )


def as_gateway(addr: str) -> grpc.aio.Channel:
    """The stack's service at `addr`, called as the gateway calls it: its certificate and the
    user's token (signed with the stack's secret) on every call, which the service verifies."""
    return callers.connect(addr, "gateway", secret=secret_file().read_text().strip())


def as_listener(addr: str) -> grpc.aio.Channel:
    """ingest at `addr`, called as a Zalo listener delivers messages."""
    return callers.connect(addr, "listener")


def percentile(samples: list[float], p: float) -> float:
    """The p-th percentile (0..100) of samples, nearest-rank."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass
class Latency:
    """Latency samples in milliseconds."""

    samples: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return percentile(self.samples, 50)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)


@dataclass(frozen=True)
class Result:
    """One measure: `id` is stable from run to run (bench/results/latest.json, comparisons)."""

    id: str
    section: str
    name: str
    value: float
    unit: str
    note: str = ""
