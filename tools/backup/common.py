"""What every part of a backup shares: the configuration, the file names, the commands it runs
(a pipeline of processes), and its errors."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "deploy/local/stack.sh"
FORMAT = 1
REDIS_FILE = "redis.rdb"
MARIADB_FILE = "mariadb.sql.gz"
POSTGRES_FILE = "postgres.dump"
MANIFEST = "manifest.json"
# Database, role and locale names are spliced into DDL: only plain names are accepted.
_NAME = re.compile(r"^[A-Za-z0-9_]{1,63}$")
LOCALE = re.compile(r"^[A-Za-z0-9_.@-]{1,63}$")

Hook = Callable[[], Awaitable[None]]
Out = Callable[[str], None]


class Refused(Exception):
    """The backup cannot be restored as it is (missing or damaged files): nothing was touched."""


class CommandFailed(Exception):
    def __init__(self, argv: Sequence[str], code: int | None, stderr: bytes) -> None:
        self.code = code
        tail = stderr.decode(errors="replace").strip()[-2000:]
        super().__init__(f"{Path(argv[0]).name} exited with {code}: {tail}")


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def plain_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r}: only letters, digits and _ are accepted")
    return value


def _is_root() -> bool:
    return os.geteuid() == 0


def pg_bin() -> Path:
    """The newest PostgreSQL's binaries (Debian's /usr/bin wrappers need a configured cluster)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name.split(".")[0])
    )
    if not found:
        raise RuntimeError("PostgreSQL binaries not found under /usr/lib/postgresql")
    return found[-1]


@dataclass(frozen=True)
class Config:
    """Where the data lives and how to reach it as an administrator."""

    mysql_db: str = "agora"
    pg_db: str = "agora"
    redis_url: str = ""
    # The Redis of the live feeds when they have one of their own (LIVE_REDIS_URL); empty: in
    # redis_url's.
    live_redis_url: str = ""
    # Admin access goes through the unix sockets in var/run with OS-user authentication, as
    # deploy/local/stack.sh does (mysql_root, psql_admin): no admin password exists.
    mysql_socket: Path = ROOT / "var/run/mysqld.sock"
    mysql_admin: str = "root"
    pg_socket_dir: Path = ROOT / "var/run"
    pg_port: int = 15432
    pg_superuser: str = "postgres"
    # The database owner (dbmate's migrator) over TCP: it holds the snapshot the dump imports and
    # reads every table for the checksums. asyncpg cannot use peer authentication as postgres.
    pg_owner: str = "agora_migrator"
    pg_owner_password: str = ""
    # Restore only: the directory of the Redis server's AOF (asked from the server when it runs).
    redis_dir: Path = ROOT / "var/redis"
    redis_stop: tuple[str, ...] = (str(STACK), "redis-stop")
    redis_start: tuple[str, ...] = (str(STACK), "redis-start")
    # None: leave services alone (tests; a stack without services).
    services_stop: tuple[str, ...] | None = (str(STACK), "services-stop")
    services_start: tuple[str, ...] | None = (str(STACK), "services-start")
    health: tuple[str, ...] = ()
    timeout: float = 300.0

    @classmethod
    def from_env(cls, **overrides: Any) -> Config:
        """The local stack's settings (deploy/local/stack.env, exported by `stack.sh run`)."""
        e = os.environ
        var = Path(e.get("AGORA_VAR", ROOT / "var"))
        password = e.get("REDIS_PASSWORD", "")
        auth = f":{password}@" if password else ""
        defaults: dict[str, Any] = {
            "redis_url": f"redis://{auth}127.0.0.1:{e.get('REDIS_PORT', '16379')}/0",
            "live_redis_url": e.get("LIVE_REDIS_ADMIN_URL", ""),
            "mysql_socket": var / "run/mysqld.sock",
            "mysql_admin": "root" if _is_root() else getpass.getuser(),
            "pg_socket_dir": var / "run",
            "pg_port": int(e.get("PG_PORT", "15432")),
            "pg_superuser": "postgres" if _is_root() else getpass.getuser(),
            "pg_owner_password": e.get("PG_MIGRATOR_PASSWORD", ""),
            "redis_dir": var / "redis",
            "health": tuple(
                [f"grpc:127.0.0.1:{e[p]}" for p in _GRPC_PORTS if p in e]
                + ([f"http://127.0.0.1:{e['GATEWAY_PORT']}/healthz"] if "GATEWAY_PORT" in e else [])
            ),
        }
        return cls(**{**defaults, **overrides})

    def pg_url(self, database: str) -> str:
        password = self.pg_owner_password
        auth = f"{self.pg_owner}:{password}" if password else self.pg_owner
        return f"postgresql://{auth}@127.0.0.1:{self.pg_port}/{database}"

    def as_postgres(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if _is_root() else []


# The plaintext gRPC health ports (the flusher's FLUSHER_PORT is one).
_GRPC_PORTS = ("INGEST_HEALTH_PORT", "TIMELINE_HEALTH_PORT", "LIKES_HEALTH_PORT", "FLUSHER_PORT")


# --- processes ---------------------------------------------------------------------------------


def _open_read(path: Path) -> int:
    return os.open(path, os.O_RDONLY)


def _open_write(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


@dataclass
class Pipeline:
    """Commands connected as a shell pipeline (each one's stdout into the next), running."""

    argvs: list[list[str]]
    procs: list[asyncio.subprocess.Process]
    _results: asyncio.Future[list[tuple[bytes, bytes]]]

    @classmethod
    async def start(
        cls,
        *argvs: Sequence[str],
        stdin: Path | None = None,
        stdout: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Pipeline:
        opened: list[int] = []
        procs: list[asyncio.subprocess.Process] = []
        try:
            source = _open_read(stdin) if stdin else asyncio.subprocess.DEVNULL
            if stdin:
                opened.append(source)
            for i, argv in enumerate(argvs):
                read_end = None
                if i < len(argvs) - 1:
                    read_end, sink = os.pipe()
                    opened += [read_end, sink]
                elif stdout:
                    sink = _open_write(stdout)
                    opened.append(sink)
                else:
                    sink = asyncio.subprocess.PIPE
                procs.append(
                    await asyncio.create_subprocess_exec(
                        *argv, stdin=source, stdout=sink, stderr=asyncio.subprocess.PIPE, env=env
                    )
                )
                if read_end is not None:
                    source = read_end
        except BaseException:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise
        finally:
            # The children hold their own copies now; ours would keep every pipe open forever.
            for fd in opened:
                os.close(fd)
        results = asyncio.ensure_future(asyncio.gather(*(p.communicate() for p in procs)))
        return cls([list(a) for a in argvs], procs, results)

    @property
    def exited(self) -> bool:
        return any(p.returncode is not None for p in self.procs)

    async def finish(self) -> bytes:
        """Wait for every command; the last one's stdout (when not sent to a file)."""
        results = await self._results
        for argv, proc, (_, err) in zip(self.argvs, self.procs, results, strict=True):
            if proc.returncode != 0:
                raise CommandFailed(argv, proc.returncode, err or b"")
        return results[-1][0] or b""

    async def kill(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        with contextlib.suppress(Exception):
            await self._results


async def run(
    *argvs: Sequence[str],
    stdin: Path | None = None,
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
) -> bytes:
    pipeline = await Pipeline.start(*argvs, stdin=stdin, stdout=stdout, env=env)
    try:
        return await pipeline.finish()
    finally:
        await pipeline.kill()


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
