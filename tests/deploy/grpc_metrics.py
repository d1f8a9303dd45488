"""Reading a running service's Prometheus endpoint in the deploy tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def requests_served(metrics_port: int, method: str) -> float:
    """The gRPC requests of `method` that the process behind 127.0.0.1:`metrics_port` counts as
    served (agora_grpc_server_requests_total, over every status)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "agora_grpc_server_requests_total"
        and sample.labels.get("method") == method
    )
