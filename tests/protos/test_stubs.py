"""The agora-protos wheel (`make stubs`): what it holds, and that it works on its own — installed
into a clean virtualenv with nothing but its dependencies, a three-line client calls the timeline.
"""

from __future__ import annotations

import asyncio
import email
import os
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from agora.messaging.v1 import ingest_service_pb2 as pb
from agora.messaging.v1 import ingest_service_pb2_grpc

from services.runtime.grpc_server import GrpcServer
from tests.helpers import ROOT, Flusher, message, mint_token
from tests.stack import Env
from tools import callers, protos

PROTOS_VERSION = (ROOT / "protos" / "VERSION").read_text().strip()
# What another team writes: certificates and a token in, a page of the timeline out.
CLIENT = """\
import grpc, os; from agora.messaging.v1 import timeline_service_pb2 as pb, timeline_service_pb2_grpc as rpc
creds = grpc.ssl_channel_credentials(*(open(os.environ[k], "rb").read() for k in ("CA", "KEY", "CERT")))
print(rpc.TimelineServiceStub(grpc.secure_channel(os.environ["TARGET"], creds)).ListMessages(pb.ListMessagesRequest(account_id=1, conversation_key="t1", limit=5), metadata=[("authorization", "Bearer " + os.environ["TOKEN"])]))
"""  # noqa: E501 (three lines as someone would paste them)


def _isolated_env() -> dict[str, str]:
    """No pip configuration (this machine's indexes and find-links) and no PYTHONPATH: the
    virtualenv gets exactly what the command names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _run(
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout}{result.stderr}"
    return result


def runtime_wheels() -> Path:
    """grpcio and protobuf (the versions this project runs) and their dependencies as wheels,
    kept in var/wheelhouse: downloaded from the package index once, then reused offline."""
    directory = Path(os.environ.get("AGORA_VAR") or ROOT / "var") / "wheelhouse"
    pins = [f"grpcio=={version('grpcio')}", f"protobuf=={version('protobuf')}"]
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    download += ["--dest", str(directory)]
    offline = subprocess.run(
        [*download, "--no-index", "--find-links", str(directory), *pins],
        capture_output=True,
        check=False,
        env=_isolated_env(),
    )
    if offline.returncode != 0:
        _run([*download, *pins])
    return directory


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return protos.build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def clean_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new virtualenv with the wheel installed from local files only."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(venv)], env=_isolated_env())
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-index"]
    install += ["--find-links", str(runtime_wheels()), "--find-links", str(wheel.parent)]
    _run([*install, f"agora-protos=={PROTOS_VERSION}"], env=_isolated_env())
    return python


def test_the_wheel_holds_the_stubs_sources_and_types(wheel: Path) -> None:
    assert wheel.name == f"agora_protos-{PROTOS_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = email.message_from_bytes(
            archive.read(f"agora_protos-{PROTOS_VERSION}.dist-info/METADATA")
        )
    for proto in (ROOT / "protos").rglob("*.proto"):
        module = proto.relative_to(ROOT / "protos").with_suffix("").as_posix()
        assert {f"{module}.proto", f"{module}_pb2.py", f"{module}_pb2.pyi"} <= names, module
        assert f"{module}_pb2_grpc.py" in names
    assert {"agora/__init__.py", "agora/py.typed", "agora/messaging/v1/__init__.py"} <= names
    assert metadata["Name"] == "agora-protos"
    assert metadata["Version"] == PROTOS_VERSION
    requires = sorted(metadata.get_all("Requires-Dist") or [])
    assert [r.split(">")[0].split("<")[0] for r in requires] == ["grpcio", "protobuf"]


def test_the_clean_virtualenv_imports_the_stubs_from_the_wheel(clean_python: Path) -> None:
    code = (
        "import agora, agora.forum.v1.like_service_pb2_grpc as m;"
        " print(m.__file__, agora.__version__)"
    )
    result = _run([str(clean_python), "-c", code], cwd=clean_python.parent, env=_isolated_env())
    location, installed = result.stdout.split()
    assert Path(location).is_relative_to(clean_python.parent.parent)
    assert installed == PROTOS_VERSION


@pytest.mark.asyncio
async def test_a_three_line_client_calls_the_timeline_through_the_wheel(
    clean_python: Path,
    timeline_server: GrpcServer,
    ingest: ingest_service_pb2_grpc.IngestServiceStub,
    flusher: Flusher,
    env: Env,
) -> None:
    assert len(CLIENT.splitlines()) == 3
    await ingest.IngestMessages(
        pb.IngestMessagesRequest(account_id=1, messages=[message("through-the-wheel")])
    )
    await flusher.drain()
    files = callers.tls_files("gateway")
    client_env = {
        **_isolated_env(),
        "CA": str(files["grpc_tls_ca"]),
        "CERT": str(files["grpc_tls_cert"]),
        "KEY": str(files["grpc_tls_key"]),
        "TARGET": f"127.0.0.1:{timeline_server.port}",
        "TOKEN": mint_token(env.jwt_secret, sub=7, accounts=[1]),
    }
    # The server runs on this event loop: the client must not block it.
    proc = await asyncio.create_subprocess_exec(
        str(clean_python),
        "-c",
        CLIENT,
        cwd=clean_python.parent,
        env=client_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert 'msg_id: "through-the-wheel"' in out.decode()
