"""The gateway's gRPC clients: one mTLS channel per upstream listener, and the end user each
call is made for.

Every call carries the request's verified bearer token in its `authorization` metadata: the
service behind checks it again and refuses a request whose user or account field is not that
user's (services/domain/access.py), so the gateway's certificate alone cannot act for anyone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any

import grpc
from agora.forum.v1 import (
    forum_read_service_pb2_grpc,
    forum_write_service_pb2_grpc,
    like_service_pb2_grpc,
)
from agora.messaging.v1 import ingest_service_pb2_grpc, timeline_service_pb2_grpc
from fastapi import Depends, Request

from services.runtime.grpc_client import open_channel
from services.runtime.tls import TlsMaterial


@dataclass(frozen=True)
class Clients:
    """Stubs, the deadline every call gets, and the end user's credential it forwards."""

    ingest: ingest_service_pb2_grpc.IngestServiceStub
    timeline: timeline_service_pb2_grpc.TimelineServiceStub
    forum_write: forum_write_service_pb2_grpc.ForumWriteServiceStub
    forum_read: forum_read_service_pb2_grpc.ForumReadServiceStub
    likes: like_service_pb2_grpc.LikeServiceStub
    timeout: float
    channels: tuple[grpc.aio.Channel, ...]
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def options(self) -> dict[str, Any]:
        """Keyword arguments of every call: its deadline and the forwarded credential."""
        return {"timeout": self.timeout, "metadata": self.metadata}

    def for_user(self, authorization: str) -> Clients:
        """The same channels, calling for the user of this (verified) Authorization header."""
        return replace(self, metadata=(("authorization", authorization),))

    @classmethod
    def connect(
        cls,
        *,
        ingest_addr: str,
        ingest_forum_addr: str,
        timeline_addr: str,
        likes_addr: str,
        timeout: float,
        tls: TlsMaterial,
    ) -> Clients:
        # Reads are retried by the channel on UNAVAILABLE; writes are not (a retried write could
        # be applied twice if the first attempt reached the server).
        ingest = open_channel(ingest_addr, tls=tls)
        forum_write = open_channel(ingest_forum_addr, tls=tls)
        timeline = open_channel(
            timeline_addr,
            tls=tls,
            idempotent_services=[
                "agora.messaging.v1.TimelineService",
                "agora.forum.v1.ForumReadService",
            ],
        )
        # Setting a like to a state is idempotent, and LikedMap only reads: both may be retried.
        likes = open_channel(
            likes_addr, tls=tls, idempotent_services=["agora.forum.v1.LikeService"]
        )
        return cls(
            ingest=ingest_service_pb2_grpc.IngestServiceStub(ingest),
            timeline=timeline_service_pb2_grpc.TimelineServiceStub(timeline),
            forum_write=forum_write_service_pb2_grpc.ForumWriteServiceStub(forum_write),
            forum_read=forum_read_service_pb2_grpc.ForumReadServiceStub(timeline),
            likes=like_service_pb2_grpc.LikeServiceStub(likes),
            timeout=timeout,
            channels=(ingest, forum_write, timeline, likes),
        )

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


def _upstream(request: Request) -> Clients:
    clients: Clients = request.app.state.clients
    # Only /api routes take clients, and AuthMiddleware has verified their header.
    return clients.for_user(request.headers["authorization"])


# A route parameter of this type receives the app's clients (opened in the app's lifespan),
# calling for the request's user.
Upstream = Annotated[Clients, Depends(_upstream)]
