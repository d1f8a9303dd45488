"""Server interceptors that wrap a method's behaviour and hand grpc back a handler of the same
kind, with the method's own (de)serializers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
