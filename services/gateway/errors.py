"""The gateway's one error shape, and the one mapping from gRPC status codes to HTTP.

Every error is `{"success": false, "error": {"code", "message", "fields"?}}`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis import exceptions as redis_errors
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match, Mount

from services.gateway import security_headers
from services.runtime.grpc_errors import FieldViolation, field_violations
from services.runtime.grpc_quota import quota_refusal

log = logging.getLogger(__name__)
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

# One HTTP status per gRPC code, as a browser developer expects.
GRPC_TO_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.OUT_OF_RANGE: 422,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    # The services answer RESOURCE_EXHAUSTED when a backlog is at its bound or Redis is full: the
    # server cannot take the write now, whoever sends it (not "you send too much": that 429 is
    # the gateway's own rate limit, or a refusal naming the caller in a QuotaFailure, below).
    # The caller keeps the write and retries after Retry-After.
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}
_RETRY_AFTER = {429: "1", 503: "1"}
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_argument",
    429: "resource_exhausted",
    503: "unavailable",
}


class ApiError(Exception):
    """An error the gateway answers with, in the one JSON shape."""

    def __init__(
        self, status: int, code: str, message: str, fields: Sequence[FieldViolation] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = list(fields)
        self.retry_after: int | None = None

    @classmethod
    def unauthenticated(cls, message: str) -> ApiError:
        return cls(401, "unauthenticated", message)

    @classmethod
    def forbidden(cls, message: str) -> ApiError:
        return cls(403, "permission_denied", message)

    @classmethod
    def unavailable(cls, message: str, retry_after: int) -> ApiError:
        error = cls(503, "unavailable", message)
        error.retry_after = retry_after
        return error

    @classmethod
    def not_found(cls, message: str) -> ApiError:
        return cls(404, "not_found", message)

    @classmethod
    def too_large(cls, limit: int) -> ApiError:
        return cls(413, "payload_too_large", f"the request body exceeds {limit} bytes")

    @classmethod
    def body_timeout(cls, seconds: float) -> ApiError:
        return cls(408, "request_timeout", f"the request body did not arrive within {seconds:g}s")

    @classmethod
    def invalid(cls, fields: Sequence[FieldViolation]) -> ApiError:
        message = "; ".join(f"{f.field}: {f.description}" for f in fields)
        return cls(422, "invalid_argument", message, fields)

    @classmethod
    def from_grpc(
        cls, error: grpc.aio.AioRpcError, names: Mapping[str, str] | None = None
    ) -> ApiError:
        """The error a route answers for `error`; `names` renames the request fields its
        violations name to the route's parameters where they differ (query → q)."""
        code = error.code()
        status = GRPC_TO_HTTP.get(code, 500)
        if status == 500:
            # Internal details stay in the logs, not in a browser.
            log.error("upstream failure %s: %s", code.name, error.details())
            return cls(500, "internal", "internal error")
        fields = field_violations(error)
        message = error.details() or code.name.lower()
        if names and any(f.field in names for f in fields):
            fields = [FieldViolation(names.get(f.field, f.field), f.description) for f in fields]
            message = "; ".join(f"{f.field}: {f.description}" for f in fields)
        api_error = cls(status, code.name.lower(), message, fields)
        quota = quota_refusal(error) if code == grpc.StatusCode.RESOURCE_EXHAUSTED else None
        if quota is not None:
            # One caller over its quota (an account past its fair share of a shard under
            # pressure): this caller sends too much; the others are still served.
            api_error.status = 429
            if quota.retry_after is not None:
                api_error.retry_after = max(1, math.ceil(quota.retry_after))
        return api_error

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.fields:
            body["fields"] = [{"field": f.field, "message": f.description} for f in self.fields]
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        elif self.status in _RETRY_AFTER:
            headers["Retry-After"] = _RETRY_AFTER[self.status]
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse({"success": False, "error": body}, self.status, headers=headers)


def has_body(headers: Headers) -> bool:
    """Whether the request announces a body (HTTP/1.1: a length or a transfer coding)."""
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")


def close_after(response: Response, headers: Headers) -> Response:
    """`response`, closing the connection when the request's body is left unread: the server
    would otherwise read (and discard) whatever the client still sends to reuse the connection."""
    if has_body(headers):
        response.headers["Connection"] = "close"
    return response


def allowed_methods(app: FastAPI, request: Request) -> str:
    """The methods some route of the app answers at the request's path (a mount of static
    files answers GET and HEAD)."""
    methods: set[str] = set()
    # The path from the top: inside a mount the request's scope is the mount's.
    top = {"type": "http", "path": request.url.path, "root_path": "", "headers": []}
    for route in app.router.routes:
        for method in _METHODS:
            match, _ = route.matches({**top, "method": method})
            if match is Match.FULL:
                methods |= {"GET", "HEAD"} if isinstance(route, Mount) else {method}
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Route every error the app can raise through ApiError.response."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(grpc.aio.AioRpcError)
    async def _grpc_error(_: Request, exc: grpc.aio.AioRpcError) -> JSONResponse:
        return ApiError.from_grpc(exc).response()

    @app.exception_handler(redis_errors.ConnectionError)
    @app.exception_handler(redis_errors.TimeoutError)
    async def _redis_away(_: Request, exc: Exception) -> JSONResponse:
        # The rate limiter's Redis is away for a moment: the caller retries, as for UNAVAILABLE.
        log.warning("rate-limit Redis unavailable: %s", exc)
        return ApiError(503, "unavailable", "try again shortly").response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        if any(err.get("type") == "json_invalid" for err in exc.errors()):
            return ApiError(400, "bad_request", "the request body is not valid JSON").response()
        fields = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")]
            fields.append(FieldViolation(".".join(loc) or "body", str(err.get("msg", "invalid"))))
        return ApiError.invalid(fields).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        response = ApiError(exc.status_code, code, str(exc.detail)).response()
        if exc.status_code == 405:
            # RFC 9110: a 405 lists the methods the resource has. Starlette names only the
            # first route of the path; a path can have several (GET and POST …/posts).
            response.headers["Allow"] = allowed_methods(app, request)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        response = ApiError(500, "internal", "internal error").response()
        # Starlette answers this one outside every middleware, SecurityHeaders included.
        for name, value in security_headers.HEADERS:
            response.headers.setdefault(name, value)
        return response
