"""docs/grpc.md's grpcurl calls without reflection (as against production): the descriptors of
`python -m tools.protos protoset`, health on the plaintext port, an API call over mTLS as the
gateway with the user's token, and a caller the access table refuses."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from services.runtime.grpc_server import GrpcServer
from tests.helpers import mint_token
from tests.stack import Env
from tools import callers, protos

pytestmark = pytest.mark.asyncio

GRPCURL = Path(sys.executable).parent / "grpcurl"


@pytest.fixture(scope="session")
def protoset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return protos.protoset(tmp_path_factory.mktemp("descriptors") / "agora.protoset")


def tls(identity: str) -> list[str]:
    files = callers.tls_files(identity)
    return [
        *("-cacert", str(files["grpc_tls_ca"])),
        *("-cert", str(files["grpc_tls_cert"])),
        *("-key", str(files["grpc_tls_key"])),
    ]


async def grpcurl(*args: str) -> tuple[int, str]:
    """Exit code and output (stdout, then stderr) of grpcurl, without blocking the servers."""
    proc = await asyncio.create_subprocess_exec(
        str(GRPCURL),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode()


async def test_health_on_the_plaintext_port(timeline_server: GrpcServer, protoset: Path) -> None:
    code, out = await grpcurl(
        "-plaintext",
        "-protoset",
        str(protoset),
        "-d",
        '{"service": "agora.messaging.v1.TimelineService"}',
        f"127.0.0.1:{timeline_server.health_port}",
        "grpc.health.v1.Health/Check",
    )
    assert code == 0, out
    assert json.loads(out) == {"status": "SERVING"}


async def list_conversations(
    server: GrpcServer, protoset: Path, token: str, account: int
) -> tuple[int, str]:
    """ListConversations of `account`, called by grpcurl as the gateway for `token`'s user."""
    return await grpcurl(
        *tls("gateway"),
        "-protoset",
        str(protoset),
        "-H",
        f"authorization: Bearer {token}",
        "-d",
        f'{{"account_id": {account}, "limit": 5}}',
        f"127.0.0.1:{server.port}",
        "agora.messaging.v1.TimelineService/ListConversations",
    )


async def test_the_gateway_calls_for_the_user_its_token_names(
    timeline_server: GrpcServer, protoset: Path, env: Env, clean: None
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    code, out = await list_conversations(timeline_server, protoset, token, account=1)
    assert code == 0, out
    assert json.loads(out) == {}  # no conversation yet: every field at its default

    code, out = await list_conversations(timeline_server, protoset, token, account=2)
    assert code != 0
    assert "PermissionDenied" in out


async def test_a_listener_may_not_read_the_timeline(
    timeline_server: GrpcServer, protoset: Path
) -> None:
    code, out = await grpcurl(
        *tls("listener"),
        "-protoset",
        str(protoset),
        "-d",
        '{"account_id": 1, "limit": 5}',
        f"127.0.0.1:{timeline_server.port}",
        "agora.messaging.v1.TimelineService/ListConversations",
    )
    assert code != 0
    assert "listener may not call /agora.messaging.v1.TimelineService/ListConversations" in out
