"""The gateway's gRPC clients, one channel per upstream service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import grpc
from agora.forum.v1 import (
    forum_read_service_pb2_grpc,
    forum_write_service_pb2_grpc,
    like_service_pb2_grpc,
)
from agora.messaging.v1 import ingest_service_pb2_grpc, timeline_service_pb2_grpc
from fastapi import Depends, Request

from services.runtime.grpc_client import open_channel


@dataclass
class Clients:
    """Stubs plus the deadline every call gets."""

    ingest: ingest_service_pb2_grpc.IngestServiceStub
    timeline: timeline_service_pb2_grpc.TimelineServiceStub
    forum_write: forum_write_service_pb2_grpc.ForumWriteServiceStub
    forum_read: forum_read_service_pb2_grpc.ForumReadServiceStub
    likes: like_service_pb2_grpc.LikeServiceStub
    timeout: float
    channels: list[grpc.aio.Channel]

    @classmethod
    def connect(
        cls, *, ingest_addr: str, timeline_addr: str, likes_addr: str, timeout: float
    ) -> Clients:
        # Reads are retried by the channel on UNAVAILABLE; writes are not (a retried write could
        # be applied twice if the first attempt reached the server).
        ingest = open_channel(ingest_addr)
        timeline = open_channel(
            timeline_addr,
            idempotent_services=[
                "agora.messaging.v1.TimelineService",
                "agora.forum.v1.ForumReadService",
            ],
        )
        # Setting a like to a state is idempotent, and LikedMap only reads: both may be retried.
        likes = open_channel(likes_addr, idempotent_services=["agora.forum.v1.LikeService"])
        return cls(
            ingest=ingest_service_pb2_grpc.IngestServiceStub(ingest),
            timeline=timeline_service_pb2_grpc.TimelineServiceStub(timeline),
            forum_write=forum_write_service_pb2_grpc.ForumWriteServiceStub(ingest),
            forum_read=forum_read_service_pb2_grpc.ForumReadServiceStub(timeline),
            likes=like_service_pb2_grpc.LikeServiceStub(likes),
            timeout=timeout,
            channels=[ingest, timeline, likes],
        )

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


def _upstream(request: Request) -> Clients:
    clients: Clients = request.app.state.clients
    return clients


# A route parameter of this type receives the app's clients (opened in the app's lifespan).
Upstream = Annotated[Clients, Depends(_upstream)]
