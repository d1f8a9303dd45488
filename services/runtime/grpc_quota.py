"""RESOURCE_EXHAUSTED about one caller: google.rpc QuotaFailure and RetryInfo details.

A full backlog refuses every caller alike and carries no detail (HTTP 503). A refusal carrying a
QuotaFailure is about its subject (an account sending past its fair share of a stream shard,
`account_id:<id>`): that caller sends too much, and the gateway answers 429 with the RetryInfo
delay as Retry-After.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status


@dataclass(frozen=True)
class QuotaRefusal:
    """What a QuotaFailure said: whose quota, and when to retry (seconds, if given)."""

    subjects: list[str]
    retry_after: float | None


def quota_status(message: str, subject: str, description: str, retry_after: float) -> grpc.Status:
    """RESOURCE_EXHAUSTED with a QuotaFailure naming `subject` and a RetryInfo of
    `retry_after` seconds (whole seconds, at least one: what an HTTP Retry-After can say)."""
    seconds = max(1, math.ceil(retry_after))
    details = []
    for detail in (
        error_details_pb2.QuotaFailure(
            violations=[
                error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)
            ]
        ),
        error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)),
    ):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=details)
    return rpc_status.to_status(status)


async def abort_over_quota(
    context: grpc.aio.ServicerContext,
    message: str,
    subject: str,
    description: str,
    retry_after: float,
) -> NoReturn:
    """Abort the call with quota_status(...)."""
    status = quota_status(message, subject, description, retry_after)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable")  # context.abort always raises


def quota_refusal(error: grpc.aio.AioRpcError) -> QuotaRefusal | None:
    """The QuotaFailure (and RetryInfo) a server attached to an error; None without one."""
    status = rpc_status.from_call(error)
    if status is None:
        return None
    subjects: list[str] = []
    retry_after: float | None = None
    found = False
    for detail in status.details:
        if detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota = error_details_pb2.QuotaFailure()
            detail.Unpack(quota)
            subjects += [v.subject for v in quota.violations]
            found = True
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            retry_after = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return QuotaRefusal(subjects, retry_after) if found else None
