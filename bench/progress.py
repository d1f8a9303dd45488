"""Progress on stderr while the bench runs: section start and end with elapsed time, steps,
and percentages for long loads (throttled, so a loop can report on every iteration)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

_started = time.perf_counter()
_last_percent: dict[str, float] = {}


def _clock() -> str:
    elapsed = int(time.perf_counter() - _started)
    return f"{elapsed // 60:02d}:{elapsed % 60:02d}"


def say(section: str, message: str) -> None:
    """One progress line: `[mm:ss] [section] message`."""
    print(f"[{_clock()}] [{section}] {message}", file=sys.stderr, flush=True)


def percent(section: str, label: str, done: float, total: float, every: float = 2.0) -> None:
    """`label… 42%`, at most once every `every` seconds per label (and always at 100%)."""
    now = time.perf_counter()
    key = f"{section}:{label}"
    finished = done >= total
    if not finished and now - _last_percent.get(key, 0.0) < every:
        return
    _last_percent[key] = now
    share = 100.0 * done / total if total else 100.0
    say(section, f"{label}… {int(share)}%")


@contextlib.contextmanager
def section(name: str, what: str = "") -> Iterator[None]:
    """Announce a section (or a part of one) and how long it took, failed or not."""
    started = time.perf_counter()
    say(name, f"start{': ' + what if what else ''}")
    ok = False
    try:
        yield
        ok = True
    finally:
        took = time.perf_counter() - started
        say(name, f"{'done' if ok else 'FAILED'}{' ' + what if what else ''} in {took:.1f}s")
