"""The gateway's gRPC clients: a few mTLS connections per upstream listener, and the end user
each call is made for.

Every call carries the request's verified bearer token in its `authorization` metadata: the
service behind checks it again and refuses a request whose user or account field is not that
user's (services/domain/access.py), so the gateway's certificate alone cannot act for anyone.
One exception, by design: it may watch any account's or course's live feed for itself, the
one watch per feed its streams share (services/gateway/feeds.py); so the certificate alone
reads whatever those feeds carry (docs/security.md says what that exposes).

A service may run several worker processes behind one port (services/runtime/workers.py): the
kernel hands each new connection to one of them, and gRPC sends every call of a connection over
it. One connection per upstream would leave all but one worker idle, so the gateway opens
`connections` channels to each listener and takes the next one for each request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any

import grpc
from agora.forum.v1 import (
    forum_read_service_pb2_grpc,
    forum_write_service_pb2_grpc,
    like_service_pb2_grpc,
)
from agora.messaging.v1 import (
    conversation_service_pb2_grpc,
    ingest_service_pb2_grpc,
    outbound_service_pb2_grpc,
    team_service_pb2_grpc,
    timeline_service_pb2_grpc,
)
from agora.search.v1 import search_service_pb2_grpc
from fastapi import Depends, Request

from services.runtime.grpc_client import open_channel
from services.runtime.tls import TlsMaterial

# Reads are retried by the channel on UNAVAILABLE; writes are not (a retried write could be
# applied twice if the first attempt reached the server).
_READS = [
    "agora.messaging.v1.TimelineService",
    "agora.forum.v1.ForumReadService",
    "agora.search.v1.SearchService",
]
# Setting a like to a state is idempotent, and LikedMap only reads: both may be retried.
_LIKES = ["agora.forum.v1.LikeService"]


@dataclass(frozen=True, slots=True)
class Clients:
    """The stubs over one connection to each upstream listener and, once handed to a request,
    the keyword arguments of each of its calls: the deadline and the end user's credential it
    forwards."""

    ingest: ingest_service_pb2_grpc.IngestServiceStub
    # Replies: served by the ingest process on its listener (services/ingest/outbound/), over
    # the ingest connection; not retried by the channel (SendMessage's key makes a retry by the
    # client safe, not a blind one here).
    outbound: outbound_service_pb2_grpc.OutboundServiceStub
    # An account's team (roster, audit, canned replies): served by the ingest process too, over
    # the ingest connection, not retried by the channel.
    team: team_service_pb2_grpc.TeamServiceStub
    # The team's changes to conversations (assignee, status): ingest's too, not retried.
    conversations: conversation_service_pb2_grpc.ConversationServiceStub
    timeline: timeline_service_pb2_grpc.TimelineServiceStub
    forum_write: forum_write_service_pb2_grpc.ForumWriteServiceStub
    forum_read: forum_read_service_pb2_grpc.ForumReadServiceStub
    # Full-text search of an account's messages and a course's forum: served by the timeline
    # process, over the timeline connection (a read, retried by the channel).
    search: search_service_pb2_grpc.SearchServiceStub
    likes: like_service_pb2_grpc.LikeServiceStub
    options: dict[str, Any] = field(default_factory=dict)


class ClientPool:
    """The app's channels (opened in its lifespan), handed out in turn to the requests."""

    def __init__(
        self, stubs: list[Clients], timeout: float, channels: tuple[grpc.aio.Channel, ...] = ()
    ) -> None:
        self._stubs = stubs
        self._next = 0
        self.timeout = timeout
        self.channels = channels

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
        connections: int = 1,
    ) -> ClientPool:
        stubs, channels = [], []
        for _ in range(connections):
            ingest = open_channel(ingest_addr, tls=tls)
            forum_write = open_channel(ingest_forum_addr, tls=tls)
            timeline = open_channel(timeline_addr, tls=tls, idempotent_services=_READS)
            likes = open_channel(likes_addr, tls=tls, idempotent_services=_LIKES)
            channels += [ingest, forum_write, timeline, likes]
            stubs.append(
                Clients(
                    ingest=ingest_service_pb2_grpc.IngestServiceStub(ingest),
                    outbound=outbound_service_pb2_grpc.OutboundServiceStub(ingest),
                    team=team_service_pb2_grpc.TeamServiceStub(ingest),
                    conversations=conversation_service_pb2_grpc.ConversationServiceStub(ingest),
                    timeline=timeline_service_pb2_grpc.TimelineServiceStub(timeline),
                    forum_write=forum_write_service_pb2_grpc.ForumWriteServiceStub(forum_write),
                    forum_read=forum_read_service_pb2_grpc.ForumReadServiceStub(timeline),
                    search=search_service_pb2_grpc.SearchServiceStub(timeline),
                    likes=like_service_pb2_grpc.LikeServiceStub(likes),
                )
            )
        return cls(stubs, timeout, tuple(channels))

    def for_user(self, authorization: str) -> Clients:
        """The next connection's stubs, calling for the user of this (verified) header."""
        stubs = self._stubs[self._next]
        self._next = (self._next + 1) % len(self._stubs)
        options = {"timeout": self.timeout, "metadata": (("authorization", authorization),)}
        return replace(stubs, options=options)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


async def _request_clients(request: Request) -> Clients:
    pool: ClientPool = request.app.state.clients
    # Only /api routes take clients, and AuthMiddleware has verified their header.
    return pool.for_user(request.headers["authorization"])


# A route parameter of this type receives the app's clients (opened in the app's lifespan),
# calling for the request's user.
RequestClients = Annotated[Clients, Depends(_request_clients)]
