"""The LikeService RPC surface: checks first (enrolment, target in course), then the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import grpc
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc as pb_grpc

from services.domain.forum import NOT_ENROLLED
from services.domain.ids import check_row_id
from services.likes.errors import (
    BacklogFull,
    ColdSetError,
    EarlierToggleUnflushed,
    NotEnrolledError,
    TargetNotFoundError,
)
from services.runtime.grpc_errors import FieldViolation, abort, abort_invalid
from services.streams.likes import KIND_NAMES, TargetKind

MAX_TARGETS = 500


class LikeStore(Protocol):
    """Where likes are kept: Redis + stream (buffered) or PostgreSQL directly (sync)."""

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool: ...

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[pb.Target]
    ) -> list[bool]: ...


def _check_target(target: pb.Target, field: str) -> FieldViolation | None:
    if target.kind not in KIND_NAMES:
        return FieldViolation(f"{field}.kind", "must be POST or COMMENT")
    return check_row_id(target.id, f"{field}.id")


def _check_ids(request: pb.SetLikeRequest | pb.LikedMapRequest) -> list[FieldViolation]:
    found = (
        check_row_id(request.user_id, "user_id"),
        check_row_id(request.course_id, "course_id"),
    )
    return [v for v in found if v is not None]


class LikeHandlers(pb_grpc.LikeServiceServicer):
    """Likes for enrolled users, on targets of their course only."""

    def __init__(self, store: LikeStore) -> None:
        self._store = store

    async def SetLike(
        self, request: pb.SetLikeRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetLikeResponse:
        problems = _check_ids(request)
        target = _check_target(request.target, "target")
        if target:
            problems.append(target)
        if problems:
            await abort_invalid(context, problems)
        kind = request.target.kind
        try:
            changed = await self._store.set_like(
                request.user_id, request.course_id, kind, request.target.id, request.like
            )
        except NotEnrolledError:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
        except TargetNotFoundError:
            await abort(
                context, grpc.StatusCode.NOT_FOUND, f"{KIND_NAMES[kind]} not found in this course"
            )
        except BacklogFull as exc:
            # The caller keeps the toggle and retries (the gateway answers 503 + Retry-After).
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc}; retry later")
        except ColdSetError as exc:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except EarlierToggleUnflushed:
            await abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"your previous toggle of this {KIND_NAMES[kind]} is still being saved; retry",
            )
        return pb.SetLikeResponse(changed=changed, liked=request.like)

    async def LikedMap(
        self, request: pb.LikedMapRequest, context: grpc.aio.ServicerContext
    ) -> pb.LikedMapResponse:
        problems = _check_ids(request)
        if len(request.targets) > MAX_TARGETS:
            problems.append(FieldViolation("targets", f"must hold at most {MAX_TARGETS}"))
        for i, target in enumerate(request.targets):
            violation = _check_target(target, f"targets[{i}]")
            if violation:
                problems.append(violation)
        if problems:
            await abort_invalid(context, problems)
        try:
            liked = await self._store.liked_map(request.user_id, request.course_id, request.targets)
        except NotEnrolledError:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
        return pb.LikedMapResponse(liked=liked)
