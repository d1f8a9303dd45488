"""The browser path's echo: the gateway's HTTP stack (FastAPI) answering every GET with one
ListMessages call to a gRPC echo of a real page (bench/echo.py serves both), answered as the
gateway's timeline page route answers it (the page's JSON as the timeline encoded it, when the
captured page carries it). What a timeline page costs through HTTP with
nothing behind the call and no authentication, tracing or middleware in front of it: the
baseline the saturated route is compared against.
"""

from __future__ import annotations

import orjson
from agora.messaging.v1 import timeline_service_pb2, timeline_service_pb2_grpc
from fastapi import FastAPI, Request

from services.gateway.convert import JsonBytes, message_json, optional_time, optional_value
from services.gateway.convert import page as json_page
from services.runtime.grpc_client import open_channel
from services.runtime.tls import TlsMaterial


def relay_app(target: str, tls: TlsMaterial) -> FastAPI:
    """Every GET: ListMessages to `target` over a channel opened as the gateway opens its own,
    the caller's bearer token forwarded as the gateway forwards it."""
    stub = timeline_service_pb2_grpc.TimelineServiceStub(open_channel(target, tls=tls))
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/{path:path}")
    async def relay(path: str, request: Request, limit: int = 50) -> JsonBytes:
        rpc = timeline_service_pb2.ListMessagesRequest(
            account_id=1, conversation_key=path[-64:] or "relay", limit=limit, messages_as_json=True
        )
        token = request.headers.get("authorization", "")
        reply = await stub.ListMessages(rpc, timeout=5, metadata=(("authorization", token),))
        return json_page(
            orjson.Fragment(reply.messages_json)
            if reply.messages_json
            else [message_json(m) for m in reply.messages],
            limit,
            reply.has_more,
            next_before_sent_at=optional_time(reply, "next_before_sent_at"),
            next_before_id=optional_value(reply, "next_before_id"),
        )

    return app
