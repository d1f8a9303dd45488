"""timeline process bootstrap: settings, telemetry, MySQL pool, the gRPC server."""

from __future__ import annotations

from agora.messaging.v1 import timeline_service_pb2, timeline_service_pb2_grpc

from services.runtime import config, logs, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.mysql import MysqlDatabase
from services.timeline.config import TimelineSettings
from services.timeline.handlers import TimelineHandlers
from services.timeline.repository import TimelineRepository

SERVICE_NAMES = [timeline_service_pb2.DESCRIPTOR.services_by_name["TimelineService"].full_name]


def build_server(settings: TimelineSettings, handlers: TimelineHandlers, port: int) -> GrpcServer:
    """The timeline gRPC server, not yet started (tests pass port 0)."""
    return GrpcServer(
        service_names=SERVICE_NAMES,
        register=lambda s: timeline_service_pb2_grpc.add_TimelineServiceServicer_to_server(
            handlers, s
        ),
        host=settings.grpc_host,
        port=port,
        grace_seconds=settings.grpc_grace_seconds,
        drain_seconds=settings.grpc_drain_seconds,
    )


async def main() -> None:
    settings = config.load(TimelineSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("timeline")
    mysql = await MysqlDatabase.connect(settings.mysql_url, maxsize=settings.mysql_pool_size)
    server = build_server(settings, TimelineHandlers(TimelineRepository(mysql)), settings.grpc_port)

    async def close() -> None:
        await mysql.close()
        shutdown_telemetry()

    await run_until_terminated(server, cleanup=[close])
