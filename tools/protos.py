"""The gRPC contract for other teams: its checks and its Python package (docs/grpc.md).

    python -m tools.protos check      buf lint; buf breaking against the released protos; VERSION
    python -m tools.protos stubs      the agora-protos wheel into packaging/stubs/dist/
    python -m tools.protos protoset F every service's descriptors (agora.*, grpc.health.v1) in one
                                      FileDescriptorSet, for grpcurl -protoset without reflection

buf is the npm package pinned in tools/buf (`npm ci --prefix tools/buf`, run here when missing).

`buf breaking` compares the working tree's protos/ with commits of the current branch: HEAD (so
an edit not committed yet is checked against the last commit, whose protos/ is that of the last
commit that changed protos/), and the parent of each of the HISTORY newest commits that changed a
.proto file (so on a clean clone, as CI runs, the latest committed changes are each checked
against the state before them, also when one submission holds several). BUF_BREAKING_AGAINST=
<buf input> replaces them all (another checkout's protos directory, another branch).

Versioning: protos/VERSION is the contract's version and the wheel's. Every commit that changes a
.proto file must change VERSION too (or a later commit must): MAJOR for a new package version
(agora.<domain>.v2), MINOR for additions (fields, RPCs, services), PATCH for comments only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

ROOT = Path(__file__).resolve().parents[1]
PROTOS = "protos"
VERSION = f"{PROTOS}/VERSION"
BUF_DIR = ROOT / "tools" / "buf"
STUBS_DIR = ROOT / "packaging" / "stubs"
DIST = STUBS_DIR / "dist"
# What the wheel's dependency ranges must start from: the generated code refuses older runtimes.
_GRPC_GENERATED = re.compile(r"^GRPC_GENERATED_VERSION = '([\d.]+)'", re.M)
_PROTOBUF_GENERATED = re.compile(r"^# Protobuf Python Version: ([\d.]+)", re.M)
# How many of the newest .proto changes are each checked against the state before them.
HISTORY = 5
_SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class ProtoError(Exception):
    """A check failed, or a tool it needs is missing; the message says what to do."""


def _run(argv: list[str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)  # noqa: S603 (argv built here)
    if check and result.returncode != 0:
        raise ProtoError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}".rstrip())
    return result


# --- buf ---------------------------------------------------------------------------------------


def _pinned_buf_version() -> str:
    lock = json.loads((BUF_DIR / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/@bufbuild/buf"]["version"])


def _installed_buf_version() -> str | None:
    manifest = BUF_DIR / "node_modules" / "@bufbuild" / "buf" / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def buf() -> Path:
    """The pinned buf; `npm ci --prefix tools/buf` first when it is missing or another version."""
    binary = BUF_DIR / "node_modules" / ".bin" / "buf"
    if binary.exists() and _installed_buf_version() == _pinned_buf_version():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise ProtoError(
            "buf comes from the npm registry and npm is not installed: "
            "apt-get install nodejs npm, then npm ci --prefix tools/buf"
        )
    print("==> installing buf (npm ci --prefix tools/buf)", file=sys.stderr)
    _run([npm, "ci", "--prefix", str(BUF_DIR), "--no-audit", "--no-fund"], ROOT)
    return binary


def lint(root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`buf lint` of root/protos (its buf.yaml)."""
    return _run([str(buf()), "lint", PROTOS], root, check=False)


def breaking(against: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`buf breaking` of root/protos against a buf input (a directory, or .git#ref=...)."""
    return _run([str(buf()), "breaking", PROTOS, "--against", against], root, check=False)


# --- the baseline: git history -----------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return _run(["git", *args], root).stdout.strip()


def _git_show(root: Path, spec: str) -> bytes | None:
    """`git show <rev>:<path>`: a file's bytes, a tree's listing; None when it does not exist."""
    result = subprocess.run(  # noqa: S603 (argv built here)
        ["git", "show", spec],  # noqa: S607 (git from PATH, as every developer runs it)
        cwd=root,
        capture_output=True,
        check=False,
    )
    return result.stdout if result.returncode == 0 else None


@dataclass(frozen=True)
class Baseline:
    """A buf input to compare with, and what it is, for the messages."""

    input: str
    what: str


def _ensure_history(root: Path) -> None:
    """A shallow clone lacks the commits the baseline is in: fetch them, or say what to do."""
    if not (root / ".git" / "shallow").exists():
        return
    print("==> shallow clone: fetching the history buf breaking compares with", file=sys.stderr)
    result = _run(["git", "fetch", "--quiet", "--unshallow"], root, check=False)
    # Without a remote, git fetch succeeds and fetches nothing: the clone is still shallow.
    if result.returncode != 0 or (root / ".git" / "shallow").exists():
        reason = result.stderr.strip() or "no remote to fetch from"
        raise ProtoError(
            f"this is a shallow clone and its history could not be fetched ({reason}): "
            "buf breaking compares protos/ with earlier commits. "
            "Run `git fetch --unshallow` (or clone without --depth), or set "
            "BUF_BREAKING_AGAINST to a buf input to compare with."
        )


def baselines(root: Path = ROOT) -> list[Baseline]:
    """What the working tree's protos/ must stay compatible with (module docstring)."""
    override = os.environ.get("BUF_BREAKING_AGAINST")
    if override:
        return [Baseline(override, f"BUF_BREAKING_AGAINST={override}")]
    if not (root / ".git").is_dir():
        raise ProtoError(
            f"{root} is not a git checkout: buf breaking compares protos/ with the last commits. "
            "Set BUF_BREAKING_AGAINST to a buf input to compare with (e.g. another checkout's "
            "protos directory)."
        )
    _ensure_history(root)
    git_dir = root / ".git"
    head = _git(root, "log", "-1", "--format=%H")
    found = [Baseline(f"{git_dir}#ref={head},subdir={PROTOS}", f"HEAD ({head[:12]})")]
    changes = _git(root, "log", f"-{HISTORY}", "--format=%H %P", "--", f"{PROTOS}/*.proto")
    for line in changes.splitlines():
        changed, *parents = line.split()
        if parents:  # the first commit of protos/ has nothing before it
            found.append(
                Baseline(
                    f"{git_dir}#ref={parents[0]},subdir={PROTOS}",
                    f"{parents[0][:12]}, before {changed[:12]} changed a .proto",
                )
            )
    return found


# --- the VERSION rule --------------------------------------------------------------------------


def _tree(root: Path, rev: str, directory: str) -> list[str]:
    """Paths of the files under `directory` at `rev` (empty when it has none)."""
    listing = _git_show(root, f"{rev}:{directory}/")
    if listing is None:
        return []
    paths: list[str] = []
    for line in listing.decode().splitlines()[2:]:  # "tree <rev>:<dir>/", "", entries
        if line.endswith("/"):
            paths += _tree(root, rev, f"{directory}/{line[:-1]}")
        elif line:
            paths.append(f"{directory}/{line}")
    return paths


def uncommitted_protos(root: Path = ROOT) -> list[str]:
    """The .proto files whose working-tree content differs from HEAD's (added, removed, edited)."""
    on_disk = {p.relative_to(root).as_posix() for p in (root / PROTOS).rglob("*.proto")}
    at_head = {p for p in _tree(root, "HEAD", PROTOS) if p.endswith(".proto")}
    edited = {
        p for p in on_disk & at_head if (root / p).read_bytes() != _git_show(root, f"HEAD:{p}")
    }
    return sorted((on_disk ^ at_head) | edited)


def _semver(text: str) -> tuple[int, int, int] | None:
    match = _SEMVER.fullmatch(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def version_problems(root: Path = ROOT) -> list[str]:
    """Why protos/VERSION does not describe protos/, if it does not."""
    problems: list[str] = []
    current = (root / VERSION).read_text().strip()
    if _semver(current) is None:
        problems.append(f"{VERSION} is {current!r}, not MAJOR.MINOR.PATCH")
    if not (root / ".git").exists():
        return problems  # an export without history: only the form can be checked
    committed = _git_show(root, f"HEAD:{VERSION}")
    bumped_in = _git(root, "log", "-1", "--format=%H", "--", VERSION)
    if bumped_in:
        later = _git(root, "log", "--format=%h %s", f"{bumped_in}..HEAD", "--", f"{PROTOS}/*.proto")
        if later:
            problems.append(
                f"commits changed .proto files after {VERSION} last changed ({bumped_in[:12]}):\n"
                + "\n".join(f"    {line}" for line in later.splitlines())
            )
    if committed is not None:
        previous = committed.decode().strip()
        changed = uncommitted_protos(root)
        if changed and current == previous:
            problems.append(
                f"{', '.join(changed)} changed since HEAD but {VERSION} is still {previous}"
            )
        old, new = _semver(previous), _semver(current)
        if current != previous and old and new and new <= old:
            problems.append(f"{VERSION} went from {previous} to {current}: it only moves forward")
    if problems:
        problems.append(
            f"bump {VERSION} with every change of a .proto file: MINOR for an addition, "
            "PATCH for comments, MAJOR for a new package version (docs/grpc.md)"
        )
    return problems


def check(root: Path = ROOT) -> list[str]:
    """Every check of the contract; the failures' messages (empty: all passed)."""
    failures: list[str] = []
    print("==> buf lint protos", file=sys.stderr)
    result = lint(root)
    if result.returncode != 0:
        failures.append(f"buf lint:\n{result.stdout}{result.stderr}".rstrip())
    for baseline in baselines(root):
        print(f"==> buf breaking protos against {baseline.what}", file=sys.stderr)
        result = breaking(baseline.input, root)
        if result.returncode != 0:
            failures.append(
                f"buf breaking against {baseline.what}:\n{result.stdout}{result.stderr}".rstrip()
            )
    print(f"==> {VERSION} follows the protos", file=sys.stderr)
    failures += version_problems(root)
    return failures


# --- the Python package ------------------------------------------------------------------------


def generate(out: Path, root: Path = ROOT) -> list[Path]:
    """The agora.* modules (messages, .pyi, gRPC stubs) of root/protos into `out`, as
    deploy/local/stack.sh's gen_protos makes them; returns the .proto files."""
    protos = sorted((root / PROTOS).rglob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root / PROTOS}"]
    argv += [f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}"]
    _run(argv + [str(p) for p in protos], root)
    return protos


def _check_dependency_floors(package: Path, pyproject: str) -> None:
    """The wheel's grpcio / protobuf floors must be the versions the generated code demands."""
    code = "\n".join(p.read_text() for p in sorted(package.rglob("*.py")))
    for name, pattern in (("grpcio", _GRPC_GENERATED), ("protobuf", _PROTOBUF_GENERATED)):
        needed = set(pattern.findall(code))
        if len(needed) != 1:
            raise ProtoError(f"generated code names {name} versions {sorted(needed)}")
        floor = f'"{name}>={needed.pop()},'
        if floor not in pyproject:
            raise ProtoError(
                f"the generated code needs {floor[1:-1]}: update the {name} range in "
                f"{STUBS_DIR.relative_to(ROOT)}/pyproject.toml (grpcio-tools was upgraded?)"
            )


def stage(directory: Path, root: Path = ROOT) -> Path:
    """The package's source tree in `directory`: packaging/stubs' files, protos/VERSION, and
    agora/ with the generated modules, their .proto sources, __init__.py files and py.typed."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(STUBS_DIR / name, directory / name)
    version = (root / VERSION).read_text().strip()
    (directory / "VERSION").write_text(version + "\n")
    package = directory / "agora"
    for proto in generate(directory, root):
        shutil.copy(proto, directory / proto.relative_to(root / PROTOS))
    for sub in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (sub / "__init__.py").touch()
    (package / "__init__.py").write_text(
        '"""gRPC and protobuf stubs of the agora services, generated from their protos."""\n\n'
        f'__version__ = "{version}"\n'
    )
    (package / "py.typed").touch()
    _check_dependency_floors(package, (directory / "pyproject.toml").read_text())
    return directory


def build_wheel(outdir: Path = DIST, root: Path = ROOT) -> Path:
    """Build agora_protos-<protos/VERSION>-py3-none-any.whl into `outdir`; its path."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agora-protos-") as tmp:
        source = stage(Path(tmp), root)
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation"]
        _run([*argv, "--outdir", str(outdir), str(source)], root)
    version = (root / VERSION).read_text().strip()
    wheel = outdir / f"agora_protos-{version}-py3-none-any.whl"
    if not zipfile.is_zipfile(wheel):
        raise ProtoError(f"the build did not produce {wheel}")
    return wheel


# --- descriptors for grpcurl -------------------------------------------------------------------


def protoset(out: Path, root: Path = ROOT) -> Path:
    """Every service's file descriptors with their imports, dependencies first, as one
    FileDescriptorSet: `grpcurl -protoset` then needs neither reflection nor .proto files."""
    modules = ["grpc_health.v1.health_pb2"]
    for proto in sorted((root / PROTOS).rglob("*.proto")):
        name = proto.relative_to(root / PROTOS).with_suffix("").as_posix()
        modules.append(name.replace("/", ".") + "_pb2")
    files = descriptor_pb2.FileDescriptorSet()
    done: set[str] = set()

    def add(descriptor: FileDescriptor) -> None:
        if descriptor.name in done:
            return
        done.add(descriptor.name)
        for dependency in descriptor.dependencies:
            add(dependency)
        descriptor.CopyToProto(files.file.add())

    for module in modules:
        add(importlib.import_module(module).DESCRIPTOR)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(files.SerializeToString())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="buf lint, buf breaking, the VERSION rule")
    commands.add_parser("stubs", help=f"build the wheel into {DIST.relative_to(ROOT)}/")
    descriptors = commands.add_parser("protoset", help="a FileDescriptorSet for grpcurl")
    descriptors.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            failures = check()
            for failure in failures:
                print(f"\nerror: {failure}", file=sys.stderr)
            if failures:
                return 1
            print("protos: lint, breaking and VERSION checks passed", file=sys.stderr)
        elif args.command == "stubs":
            print(build_wheel())
        else:
            print(protoset(args.out))
    except ProtoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
