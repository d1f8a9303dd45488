"""gateway process bootstrap: settings, telemetry, uvicorn (which drains on SIGTERM)."""

from __future__ import annotations

import uvicorn

from services.gateway.app import create_app
from services.gateway.config import GatewaySettings
from services.runtime import config, logs, metrics, telemetry


async def main() -> None:
    settings = config.load(GatewaySettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("gateway")
    metrics.serve(settings.metrics_port)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=settings.gateway_host,
            port=settings.gateway_port,
            loop="none",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=int(settings.grpc_grace_seconds),
            proxy_headers=True,
        )
    )
    try:
        await server.serve()
    finally:
        shutdown_telemetry()
