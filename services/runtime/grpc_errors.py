"""Rich gRPC errors: INVALID_ARGUMENT with google.rpc.BadRequest field violations."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.runtime import errors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FieldViolation:
    """One wrong field of a request: its path and what is wrong with it."""

    field: str
    description: str


def bad_request_status(
    message: str, violations: Sequence[FieldViolation], code: int = code_pb2.INVALID_ARGUMENT
) -> grpc.Status:
    """A grpc.Status (INVALID_ARGUMENT unless told: NOT_FOUND for a field naming nothing that
    exists) carrying a BadRequest detail with one FieldViolation per problem."""
    detail = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in violations
        ]
    )
    packed = any_pb2.Any()
    packed.Pack(detail)
    status = status_pb2.Status(code=code, message=message, details=[packed])
    return rpc_status.to_status(status)


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """Abort the call with `code`; typed NoReturn so callers need no unreachable returns."""
    await context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort always raises


async def abort_invalid(
    context: grpc.aio.ServicerContext, violations: Sequence[FieldViolation]
) -> NoReturn:
    """Abort the call with INVALID_ARGUMENT and the field violations."""
    message = "; ".join(f"{v.field}: {v.description}" for v in violations)
    status = bad_request_status(message, violations)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable")  # context.abort always raises


def field_violations(error: grpc.aio.AioRpcError) -> list[FieldViolation]:
    """The field violations a server attached to an error, if any."""
    status = rpc_status.from_call(error)
    if status is None:
        return []
    found: list[FieldViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            found.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
    return found


@dataclass(frozen=True)
class _Malformed:
    detail: str


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Turns two kinds of failure into the status a caller can act on, instead of UNKNOWN:
    bytes that are not the request message (corrupt wire data, invalid UTF-8 in a string) are
    INVALID_ARGUMENT; a datastore that is down or restarting is UNAVAILABLE (retry later)."""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        deserialize = handler.request_deserializer
        inner = handler.unary_unary

        def safe_deserialize(data: bytes) -> Any:
            try:
                return deserialize(data)
            except DecodeError as exc:
                return _Malformed(str(exc).split(": ", 1)[-1])

        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, _Malformed):
                await abort_invalid(
                    context,
                    [FieldViolation("request", f"is not a valid message: {request.detail}")],
                )
            try:
                return await inner(request, context)
            except Exception as exc:
                if not errors.is_transient(exc):
                    raise
                log.warning("datastore unavailable: %s", exc)
                await abort(
                    context, grpc.StatusCode.UNAVAILABLE, "a datastore is unavailable; retry"
                )

        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=safe_deserialize,
            response_serializer=handler.response_serializer,
        )
