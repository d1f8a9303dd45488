"""The LikeService RPC surface: the store, which checks enrolment and the target in the course
(the fields are checked before, by services/domain/field_rules.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import grpc
from agora.forum.v1 import like_service_pb2 as pb
from agora.forum.v1 import like_service_pb2_grpc as pb_grpc

from services.domain.forum import NOT_ENROLLED
from services.likes.errors import (
    BacklogFull,
    ColdSetError,
    EarlierToggleUnflushed,
    NotEnrolledError,
    TargetNotFoundError,
)
from services.runtime.grpc_errors import abort
from services.streams.likes import KIND_NAMES, TargetKind


class LikeStore(Protocol):
    """Where likes are kept: Redis + stream (buffered) or PostgreSQL directly (sync)."""

    async def set_like(
        self, user_id: int, course_id: int, kind: TargetKind, target_id: int, like: bool
    ) -> bool: ...

    async def liked_map(
        self, user_id: int, course_id: int, targets: Sequence[pb.Target]
    ) -> list[bool]: ...


class LikeHandlers(pb_grpc.LikeServiceServicer):
    """Likes for enrolled users, on targets of their course only."""

    def __init__(self, store: LikeStore) -> None:
        self._store = store

    async def SetLike(
        self, request: pb.SetLikeRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetLikeResponse:
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
        try:
            liked = await self._store.liked_map(request.user_id, request.course_id, request.targets)
        except NotEnrolledError:
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, NOT_ENROLLED)
        return pb.LikedMapResponse(liked=liked)
