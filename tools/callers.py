"""Calling the services from outside them, with a workload identity: as a Zalo listener, or as
the gateway calling for the user each request names (tools, the benchmarks, the tests).

A caller presents var/tls/<identity>.pem (tools/certs.py). Calls the gateway makes carry the end
user's token; `ForwardUser` mints one per user and account from the local HS256 secret, the way
the gateway forwards the token a browser sent — only something holding the signing key can.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from services.runtime.grpc_client import open_channel
from services.runtime.tls import TlsMaterial
from tools.jwt_token import ROOT, mint

TOKEN_TTL_SECONDS = 3600
# A call that names no user (an account's timeline) is made for this one.
DEFAULT_USER = 1


def tls_dir() -> Path:
    """The local CA and certificates (`make up` writes them)."""
    return Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "tls"


def tls_files(identity: str, directory: Path | None = None) -> dict[str, Any]:
    """GRPC_TLS_CA / _CERT / _KEY of `identity`, as settings fields."""
    directory = directory or tls_dir()
    return {
        "grpc_tls_ca": directory / "ca.pem",
        "grpc_tls_cert": directory / f"{identity}.pem",
        "grpc_tls_key": directory / f"{identity}.key",
    }


def tls_env(identity: str, directory: Path | None = None) -> dict[str, str]:
    """The same, as environment variables for a service process."""
    return {name.upper(): str(path) for name, path in tls_files(identity, directory).items()}


def material(identity: str, directory: Path | None = None) -> TlsMaterial:
    files = tls_files(identity, directory)
    return TlsMaterial.load(files["grpc_tls_ca"], files["grpc_tls_cert"], files["grpc_tls_key"])


class ForwardUser(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds `authorization: Bearer <token>` for the request's user (user_id, else
    agent_user_id, else actor_user_id) and account (account_id), unless the call already
    carries one."""

    def __init__(self, secret: str) -> None:
        self._secret = secret
        self._tokens: dict[tuple[int, int], tuple[str, float]] = {}

    def token(self, user_id: int, account_id: int = 0) -> str:
        key = (user_id, account_id)
        cached = self._tokens.get(key)
        if cached is None or cached[1] < time.time() + 60:
            accounts = [account_id] if account_id else []
            token = mint(self._secret, user_id, accounts, TOKEN_TTL_SECONDS)
            cached = self._tokens[key] = (token, time.time() + TOKEN_TTL_SECONDS)
        return cached[0]

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        metadata = list(client_call_details.metadata or ())
        if not any(key == "authorization" for key, _ in metadata):
            user = (
                getattr(request, "user_id", 0)
                or getattr(request, "agent_user_id", 0)
                or getattr(request, "actor_user_id", 0)
            )
            token = self.token(user or DEFAULT_USER, getattr(request, "account_id", 0))
            metadata.append(("authorization", f"Bearer {token}"))
        details = client_call_details._replace(metadata=grpc.aio.Metadata(*metadata))
        return await continuation(details, request)


def connect(
    target: str,
    identity: str,
    *,
    secret: str | None = None,
    directory: Path | None = None,
    idempotent_services: Sequence[str] = (),
) -> grpc.aio.Channel:
    """An mTLS channel to `target` as `identity`; with `secret`, calling as the gateway does for
    the user each request names."""
    return open_channel(
        target,
        tls=material(identity, directory),
        idempotent_services=idempotent_services,
        interceptors=[ForwardUser(secret)] if secret else [],
    )
