"""Server interceptors that wrap a method's behaviour and hand grpc back a handler of the same
kind, with the method's own (de)serializers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

UnaryBehavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def rebuilt(make_handler: Callable[..., Any], handler: Any, behavior: Callable[..., Any]) -> Any:
    """A handler made by `make_handler` (grpc.unary_unary_rpc_method_handler, …) that runs
    `behavior` and keeps `handler`'s request deserializer and response serializer."""
    return make_handler(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class UnaryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps the behaviour of unary-unary methods; streaming methods pass through untouched."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behavior = self.wrap(handler.unary_unary, handler_call_details.method)
        return rebuilt(grpc.unary_unary_rpc_method_handler, handler, behavior)

    def wrap(self, inner: UnaryBehavior, method: str) -> UnaryBehavior:
        """What runs instead of `inner`, the behaviour of `method`."""
        raise NotImplementedError


Check = Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]


def _checked_call(
    inner: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    check: Check,
    *,
    one_request: bool,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """`inner`'s one response once `check` let the call through (without a request for a call
    streaming its requests: none can be read before the handler reads the stream)."""

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await check(request if one_request else None, context)
        return await inner(request, context)

    return call


def _checked_stream(
    inner: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]],
    check: Check,
    *,
    one_request: bool,
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """`inner`'s responses once `check` let the call through. A call streaming its requests is
    checked without one: none can be read before the handler reads the stream."""

    async def streaming(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await check(requests if one_request else None, context)
        async for response in inner(requests, context):
            yield response

    return streaming


# Each kind of method, how grpc makes its handler, and how its call is checked: every kind is,
# including one no API has today (requests streamed, one response).
_KINDS: tuple[tuple[str, Callable[..., Any], Callable[..., Any], bool], ...] = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, _checked_call, True),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, _checked_stream, True),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, _checked_stream, False),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, _checked_call, False),
)


def checked_first(handler: Any, check: Check) -> Any:
    """`handler` made to await `check(request, context)` before its behaviour runs, for every
    kind of method (a call streaming its requests is checked with None for its request)."""
    for kind, make_handler, checked, one_request in _KINDS:
        inner = getattr(handler, kind)
        if inner is not None:
            return rebuilt(make_handler, handler, checked(inner, check, one_request=one_request))
    return handler
