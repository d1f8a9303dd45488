"""The HA engines' nodes of the local stack (`make up HA=1`, docs/high-availability.md), as the
failover faults see them: which node leads, how far its copy lags, and a machine's loss, freeze or
partition, done to the node's processes the way a dead or frozen host would do it.

PostgreSQL nodes are reached as the superuser over TCP (Patroni's own login); Galera nodes as the
administrator over their sockets (what `stack.sh` does), since isolating a node needs SUPER.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import signal
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import asyncpg

from tests.chaos.harness.local_stack import supervisorctl, var

NODES = (1, 2)
# A replica's state in Patroni's /cluster: "running" (3.0), "streaming" (from 3.0.3 on).
REPLICATING = ("running", "streaming")


def _superuser() -> str:
    # The stack's initdb superuser: postgres when it runs as root, else the user itself.
    return "postgres" if os.geteuid() == 0 else getpass.getuser()


@dataclass(frozen=True)
class HaNode:
    """One of an HA engine's two nodes (NODES), each on the port after the one before."""

    n: int
    # What the engine's nodes are called, and the variable that holds the first one's port.
    prefix: ClassVar[str]
    first_port: ClassVar[str]

    @property
    def name(self) -> str:
        return f"{self.prefix}-{self.n}"

    @property
    def port(self) -> int:
        return int(os.environ[self.first_port]) + self.n - 1

    @property
    def other(self) -> Self:
        return type(self)(3 - self.n)


@dataclass(frozen=True)
class PgNode(HaNode):
    """One Patroni member (`ha:patroni-<n>`) and the PostgreSQL it runs."""

    prefix = "pg"
    first_port = "HA_PG_PORT"

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{int(os.environ['HA_PATRONI_PORT']) + self.n - 1}"

    async def is_primary(self) -> bool:
        """Patroni's own answer (what HAProxy routes by): holds the leader lock and runs as
        primary."""
        return await _http_ok(f"{self.rest}/primary")

    async def connect(self, seconds: float = 2) -> asyncpg.Connection:
        e = os.environ
        return await asyncpg.connect(
            host="127.0.0.1",
            port=self.port,
            user=_superuser(),
            password=e["PG_SUPERUSER_PASSWORD"],
            database="agora_test",
            timeout=seconds,
            command_timeout=seconds,
        )

    async def _pids(self) -> list[int]:
        """Patroni, its postmaster and every backend: what dies or freezes with the machine."""
        pids = [await _supervised_pid(f"ha:patroni-{self.n}")]
        pidfile = var() / "ha" / f"pg-{self.n}" / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            postmaster = int(pidfile.read_text().split()[0])
            pids += [postmaster, *_children(postmaster)]
        return [p for p in pids if p > 0]

    async def signal(self, sig: signal.Signals) -> int:
        """Send `sig` to the whole machine; how many processes got it."""
        return _signal_all(await self._pids(), sig)

    async def walsender(self) -> int | None:
        """The leader's WAL sender to its standby: the replication link's sending end (stopped,
        it sends nothing more; a stopped receiver would still find the sent WAL in its socket)."""
        for pid in await self._pids():
            if "walsender" in _cmdline(pid):
                return pid
        return None

    async def start(self) -> None:
        await supervisorctl("start", f"ha:patroni-{self.n}")


async def pg_leader() -> PgNode:
    for n in NODES:
        if await PgNode(n).is_primary():
            return PgNode(n)
    raise RuntimeError("no PostgreSQL node is the Patroni leader")


async def pg_members() -> dict[str, dict[str, Any]]:
    """Patroni's view of the cluster: member name → role, state, lag (bytes), timeline."""
    for n in NODES:
        with contextlib.suppress(OSError, ValueError):
            body = await _http_json(f"{PgNode(n).rest}/cluster")
            return {m["name"]: m for m in body.get("members", [])}
    return {}


async def pg_sync_standby(node: PgNode) -> bool:
    """`node` streams again as the synchronous standby (the pair is whole)."""
    member = (await pg_members()).get(node.name, {})
    return member.get("role") == "sync_standby" and member.get("state") in REPLICATING


async def pg_replication(leader: PgNode) -> dict[str, float]:
    """The standby's distance behind the leader, measured on the leader just before a fault: WAL
    bytes the standby has not flushed yet (what a failover would lose), the replay lag
    pg_stat_replication reports, and whether the standby is synchronous."""
    conn = await leader.connect()
    try:
        row = await conn.fetchrow(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn) AS bytes,"
            " coalesce(extract(epoch FROM replay_lag), 0) AS seconds, sync_state"
            " FROM pg_stat_replication ORDER BY sync_state = 'sync' DESC LIMIT 1"
        )
    finally:
        await conn.close()
    if row is None:
        return {"standby_lag_bytes": -1, "standby_lag_ms": -1, "standby_synchronous": 0}
    return {
        "standby_lag_bytes": float(row["bytes"] or 0),
        "standby_lag_ms": round(float(row["seconds"]) * 1000, 1),
        "standby_synchronous": int(row["sync_state"] == "sync"),
    }


async def patroni_config(**settings: Any) -> None:
    """Change the cluster's dynamic configuration (`patronictl edit-config`), as an operator
    would; every member applies it within a loop."""
    args = [f"{key}={json.dumps(value)}" for key, value in settings.items()]
    command = ["patronictl", "-c", str(var() / "ha" / "patroni-1.yml")]
    flags = [item for arg in args for item in ("--set", arg)]
    proc = await asyncio.create_subprocess_exec(
        *command,
        "edit-config",
        "--force",
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"patronictl edit-config {args}: {err.decode().strip()}")


@dataclass(frozen=True)
class GaleraNode(HaNode):
    """One Galera data node (`ha:galera-<n>`)."""

    prefix = "galera"
    first_port = "HA_MYSQL_PORT"

    async def sql(self, statement: str) -> list[list[str]]:
        """As the administrator over the node's socket; rows of tab-separated columns."""
        admin = "root" if os.geteuid() == 0 else getpass.getuser()
        proc = await asyncio.create_subprocess_exec(
            "mariadb",
            "--no-defaults",
            f"--socket={var() / 'run' / f'galera-{self.n}.sock'}",
            "-u",
            admin,
            "--connect-timeout=2",
            "-N",
            "-B",
            "-e",
            statement,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"{self.name}: {err.decode().strip()}")
        return [line.split("\t") for line in out.decode().splitlines()]

    async def status(self, *names: str) -> dict[str, str]:
        quoted = ", ".join(f"'{n}'" for n in names)
        rows = await self.sql(f"SHOW STATUS WHERE Variable_name IN ({quoted})")
        return {row[0]: row[1] for row in rows}

    async def synced(self) -> bool:
        """In the primary component, Synced, and the cluster whole (both nodes and garbd)."""
        s = await self.status("wsrep_local_state_comment", "wsrep_cluster_size", "wsrep_ready")
        return (
            s.get("wsrep_local_state_comment") == "Synced"
            and s.get("wsrep_cluster_size") == "3"
            and s.get("wsrep_ready") == "ON"
        )

    async def isolate(self, on: bool) -> None:
        """Cut the node off the group (Galera's `gmcast.isolate`): it runs on, alone, in a
        minority."""
        await self.sql(f"SET GLOBAL wsrep_provider_options = 'gmcast.isolate={int(on)}'")

    async def kill(self) -> int:
        return _signal_all([await _supervised_pid(f"ha:galera-{self.n}")], signal.SIGKILL)

    async def start(self) -> None:
        await supervisorctl("start", f"ha:galera-{self.n}")


async def galera_replication() -> dict[str, float]:
    """How far apart the two copies are just before a fault: the difference of their last
    committed write set, and the write sets waiting to be applied on each."""
    seen = {}
    for n in NODES:
        seen[n] = await GaleraNode(n).status("wsrep_last_committed", "wsrep_local_recv_queue")
    committed = [int(s.get("wsrep_last_committed", 0)) for s in seen.values()]
    return {
        "write_sets_apart": abs(committed[0] - committed[1]),
        "apply_queue": max(int(s.get("wsrep_local_recv_queue", 0)) for s in seen.values()),
    }


async def _supervised_pid(program: str) -> int:
    """The pid supervisord reports for a program of the local stack (0: not running)."""
    out = (await supervisorctl("pid", program)).strip()
    return int(out) if out.isdigit() else 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            # The command may hold spaces and parentheses: the fields after the last ')'.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _signal_all(pids: list[int], sig: signal.Signals) -> int:
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            sent += 1
    return sent


async def _http_ok(url: str) -> bool:
    def get() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (local URL)
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    return await asyncio.to_thread(get)


async def _http_json(url: str) -> Any:
    def get() -> Any:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (local URL)
            return json.loads(response.read())

    return await asyncio.to_thread(get)
