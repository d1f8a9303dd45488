"""CPU time per unit of work, per process: what a saturated run spends where.

A saturated run on this machine's 2 cores is bounded by the CPU each request costs across every
process it passes through (the load generator included), not by any one of them. Reading each
process's user + system time before and after a run (Linux /proc/<pid>/stat) gives that cost in
milliseconds per request, and the rate the cores could sustain at it: the figure that says whether
a throughput target is within reach of the code or of the machine.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SS = "/usr/bin/ss"  # iproute2
_TICKS = os.sysconf("SC_CLK_TCK")
_PID = re.compile(r"pid=(\d+)")
# The load generator: this process (a client loop) and its children (wrk) once waited for.
LOAD = "load generator"


def listening_pids(port: int) -> frozenset[int]:
    """Every process holding a listening TCP socket on `port` (uvicorn's workers share one)."""
    out = subprocess.run(  # noqa: S603 (fixed arguments)
        [SS, "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    pids = frozenset(int(p) for p in _PID.findall(out))
    if not pids:
        raise SystemExit(f"no process listens on port {port} (or ss cannot see its owner)")
    return pids


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the command's closing parenthesis: fields[0] is stat(5)'s field 3 (the state).
    return text.rpartition(")")[2].split()


def _with_descendants(roots: frozenset[int]) -> dict[int, float]:
    """CPU seconds of `roots` and every process below them (PostgreSQL forks a backend per
    connection; the server's own pid does none of the queries)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = _cpu(fields)
    found: dict[int, float] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in cpu and pid not in found:
            found[pid] = cpu[pid]
            todo += children.get(pid, [])
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` so far (0 once it is gone)."""
    fields = _stat_fields(pid)
    return 0.0 if fields is None else _cpu(fields)


def _cpu(fields: list[str]) -> float:
    # utime, stime, cutime and cstime: stat(5)'s fields 14 to 17. The last two are the children
    # it has waited for: a backend that ends inside a run leaves its CPU in its parent's.
    return sum(int(f) for f in fields[11:15]) / _TICKS


def _load_seconds() -> float:
    # The bench process (a client loop) and its waited-for children (wrk).
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@dataclass
class CpuCost:
    """CPU milliseconds per unit of work, by component, over one run."""

    per_unit_ms: dict[str, float] = field(default_factory=dict)
    cores_busy: float = 0.0  # CPU seconds over wall seconds, every component together

    @property
    def total_ms(self) -> float:
        return sum(self.per_unit_ms.values())

    def ceiling_per_s(self, cores: int | None = None) -> float:
        """Units per second the machine's cores could sustain at this cost."""
        n = cores or os.cpu_count() or 1
        return 1000.0 * n / self.total_ms if self.total_ms else 0.0

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in self.per_unit_ms.items())
        return f"{parts}; {self.cores_busy:.2f} cores busy"


@dataclass
class CpuSpent:
    """CPU seconds each component spent over one run (filled when the block ends)."""

    seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0

    def per(self, units: int) -> CpuCost:
        """The run's CPU spread over the `units` of work it did."""
        if not units or not self.wall_seconds:
            return CpuCost()
        busy = sum(self.seconds.values()) / self.wall_seconds
        return CpuCost({k: 1000 * v / units for k, v in self.seconds.items()}, busy)


@contextmanager
def cpu_spent(groups: Mapping[str, frozenset[int]]) -> Iterator[CpuSpent]:
    """The CPU each group of processes, and the load generator, spends inside the block."""
    before = {name: _with_descendants(pids) for name, pids in groups.items()}
    load_before = _load_seconds()
    started = time.perf_counter()
    spent = CpuSpent()
    yield spent
    spent.wall_seconds = time.perf_counter() - started
    for name, pids in groups.items():
        # A process born inside the block (a new backend) spent all its CPU inside it; one that
        # ended inside it is counted in its parent's children's time (its whole life: PgBouncer
        # keeps backends open, so that overcount is rare).
        now = _with_descendants(pids)
        spent.seconds[name] = sum(s - before[name].get(p, 0.0) for p, s in now.items())
    spent.seconds[LOAD] = _load_seconds() - load_before
