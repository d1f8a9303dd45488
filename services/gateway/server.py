"""gateway process bootstrap: settings, telemetry, uvicorn (which drains on SIGTERM).

With WORKERS > 1 (default: one per core) a supervisor runs that many copies; each binds the port
with SO_REUSEPORT and the kernel spreads connections over them (services/runtime/workers.py).
"""

from __future__ import annotations

import socket

import uvicorn

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.runtime import config, logs, metrics, telemetry, workers


def listening_socket(host: str, port: int) -> socket.socket:
    """The HTTP port, shared with the other workers (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def main() -> None:
    settings = config.load(GatewaySettings)
    logs.setup(settings.log_level)
    processes = workers.count(settings.workers)
    if processes > 1 and not workers.is_worker():
        raise SystemExit(await workers.supervise(processes, settings.metrics_port))
    shutdown_telemetry = telemetry.setup("gateway")
    if not workers.is_worker():  # the supervisor serves the workers' metrics together
        metrics.serve(settings.metrics_port)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            loop="none",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=int(settings.grpc_grace_seconds),
            proxy_headers=True,
        )
    )
    try:
        await server.serve(sockets=[listening_socket(settings.gateway_host, settings.gateway_port)])
    finally:
        shutdown_telemetry()
