"""gateway process bootstrap: the shared one (settings, logs, workers, telemetry, metrics:
services/runtime/service.py), then uvicorn, which drains on SIGTERM.

With WORKERS > 1 (default: one per core) a supervisor runs that many copies; each binds the port
with SO_REUSEPORT and the kernel spreads connections over them (services/runtime/workers.py).
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.gateway.live_stream import Streams
from services.runtime import service


def listening_socket(host: str, port: int) -> socket.socket:
    """The HTTP port, shared with the other workers (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class GatewayServer(uvicorn.Server):
    """uvicorn, ending the app's event streams first when it shuts down (SIGTERM): each ends
    with a last comment and a proper end of its body, so its client reconnects at once (to
    another replica) and the drain does not wait for streams that never end by themselves."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app: Any = self.config.app  # the gateway app serve() built
        live: Streams | None = getattr(app.state, "live", None)
        if live is not None:
            live.shut_down()
        await super().shutdown(sockets)


async def serve(settings: GatewaySettings) -> None:
    """The app under uvicorn on the shared port until SIGTERM (uvicorn drains first)."""
    server = GatewayServer(
        uvicorn.Config(
            create_app(settings),
            loop="none",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=int(settings.grpc_grace_seconds),
            proxy_headers=True,
        )
    )
    await server.serve(sockets=[listening_socket(settings.gateway_host, settings.gateway_port)])


main = service.process("gateway", GatewaySettings, serve)
