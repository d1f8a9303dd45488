"""Where the metrics ports listen: on every address of a pod, whose IP Prometheus scrapes, and on
loopback alone on the local stack, which no other machine is to reach (METRICS_HOST)."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from services.runtime import metrics
from services.runtime.config import ServiceSettings
from tests.deploy.k8s_support import SERVICES, Doc, deployment_named
from tests.helpers import ROOT
from tools import k8s_validate
from tools.ports import free_port

LOCAL = ROOT / "deploy" / "local"


def test_a_deployment_leaves_the_metrics_port_on_every_address(docs: list[Doc]) -> None:
    assert ServiceSettings.model_fields["metrics_host"].default == "0.0.0.0"
    for name in SERVICES:
        env = k8s_validate.environment(deployment_named(docs, name), docs)
        assert "METRICS_HOST" not in env, name


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_the_local_stack_keeps_the_metrics_port_on_loopback(service: str) -> None:
    """As run-service.sh starts the service: stack.env, then the service's own file."""
    script = (
        'set -a; source "$1/stack.env"; source "$1/env/$2.env"; echo "$METRICS_HOST $METRICS_PORT"'
    )
    shown = subprocess.run(
        ["bash", "-c", script, "bash", str(LOCAL), service],
        capture_output=True,
        text=True,
        check=True,
        env={"root": str(ROOT)},
    ).stdout.split()
    host, port = shown
    assert (host, port.isdigit()) == ("127.0.0.1", True)


def test_the_metrics_port_listens_on_the_address_it_is_given() -> None:
    assert metrics.serve(None, "127.0.0.1") is None
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")
    assert server is not None
    try:
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert b"agora_grpc_server_requests" in reply.read()
    finally:
        server.shutdown()
        server.server_close()
