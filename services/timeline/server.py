"""timeline process bootstrap: settings, telemetry, MySQL and PostgreSQL pools, the gRPC server."""

from __future__ import annotations

from agora.forum.v1 import forum_read_service_pb2, forum_read_service_pb2_grpc
from agora.messaging.v1 import timeline_service_pb2, timeline_service_pb2_grpc

from services.runtime import config, logs, metrics, postgres, telemetry
from services.runtime.grpc_server import GrpcServer, run_until_terminated
from services.runtime.mysql import MysqlDatabase
from services.timeline.config import TimelineSettings
from services.timeline.forum_handlers import ForumReadHandlers
from services.timeline.forum_repository import ForumReadRepository
from services.timeline.handlers import TimelineHandlers
from services.timeline.repository import TimelineRepository

SERVICE_NAMES = [
    timeline_service_pb2.DESCRIPTOR.services_by_name["TimelineService"].full_name,
    forum_read_service_pb2.DESCRIPTOR.services_by_name["ForumReadService"].full_name,
]


def build_server(
    settings: TimelineSettings,
    messages: TimelineHandlers,
    forum: ForumReadHandlers,
    port: int,
) -> GrpcServer:
    """The timeline gRPC server, not yet started (tests pass port 0)."""

    def register(server: object) -> None:
        timeline_service_pb2_grpc.add_TimelineServiceServicer_to_server(messages, server)
        forum_read_service_pb2_grpc.add_ForumReadServiceServicer_to_server(forum, server)

    return GrpcServer.from_settings(
        settings, service_names=SERVICE_NAMES, register=register, port=port
    )


async def main() -> None:
    settings = config.load(TimelineSettings)
    logs.setup(settings.log_level)
    shutdown_telemetry = telemetry.setup("timeline")
    metrics.serve(settings.metrics_port)
    mysql = await MysqlDatabase.connect(settings.mysql_url, maxsize=settings.mysql_pool_size)
    pool = await postgres.connect(
        settings.postgres_url, max_size=settings.postgres_pool_size, name="timeline"
    )
    try:
        server = build_server(
            settings,
            TimelineHandlers(TimelineRepository(mysql)),
            ForumReadHandlers(ForumReadRepository(pool)),
            settings.grpc_port,
        )
        await run_until_terminated(server)
    finally:
        await pool.close()
        await mysql.close()
        shutdown_telemetry()
