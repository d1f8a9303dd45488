"""One service process of a chaos stack: started, killed, paused and stopped the way a scenario
needs, with its log, its health and its metrics at hand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from tests.chaos.harness.local_stack import ROOT
from tools import callers
from tools.ports import free_port
from tools.wait_healthy import wait


@dataclass
class Service:
    """One service process: `name` is how the scenario calls it, `module` what runs."""

    name: str
    module: str
    # The API listener (mTLS); the flusher has none and this is its health port.
    port: int
    env: dict[str, str]
    log_dir: Path
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    # ingest's forum write listener.
    forum_port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    paused: bool = False
    # Stopped by the scenario on purpose (not a crash).
    down_on_purpose: bool = False
    _log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    async def start(self, **extra: str) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._log.write(f"--- start {time.strftime('%H:%M:%S')} {extra or ''}\n".encode())
        self._log.flush()
        self.proc = await asyncio.create_subprocess_exec(
            os.environ.get("PYTHON", str(ROOT / ".venv/bin/python")),
            "-m",
            f"services.{self.module}",
            cwd=ROOT,
            env={**self.env, **self.ports_env(), **extra},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._log,
        )
        self.paused = False
        self.down_on_purpose = False

    def ports_env(self) -> dict[str, str]:
        if self.module == "flusher":
            self.health_port = self.port
        return {
            "GRPC_PORT": str(self.port),
            "GRPC_FORUM_PORT": str(self.forum_port),
            "GRPC_HEALTH_PORT": str(self.health_port),
            "METRICS_PORT": str(self.metrics_port),
            # Its workload certificate (the local CA's, var/tls).
            **callers.tls_env(self.module),
        }

    async def healthy(self, seconds: float = 30) -> None:
        if await wait([f"grpc:127.0.0.1:{self.health_port}"], seconds):
            raise RuntimeError(self.why_not_healthy())

    def why_not_healthy(self) -> str:
        """What CI prints when a process never answered: whether it is still running, and how its
        log ends (the log file itself is gone with the machine)."""
        state = "still running" if self.running else f"exited {self.proc and self.proc.returncode}"
        if self._log is not None:
            self._log.flush()
        tail = self.log_path.read_text(errors="replace").splitlines()[-25:]
        return f"{self.name} did not become healthy ({state}); {self.log_path} ends:\n" + "\n".join(
            tail
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and its state, and does nothing at all."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    async def stop(self, *, on_purpose: bool = True) -> None:
        """SIGTERM (the graceful path: drain, give shards back), SIGKILL after 20 s."""
        self.resume()  # a stopped process cannot act on SIGTERM
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.down_on_purpose = on_purpose

    async def exited(self, seconds: float) -> int | None:
        assert self.proc is not None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(self.proc.wait(), seconds)
        return None

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_count(self, text: str, *, unless: str | None = None) -> int:
        """Lines of this service's log (every run of it) with `text` (and without `unless`)."""
        if self._log is not None:
            self._log.flush()
        if not self.log_path.exists():
            return 0
        with self.log_path.open(errors="replace") as log:
            return sum(text in line and not (unless and unless in line) for line in log)

    async def metrics(self) -> list[Any]:
        """The metric families it serves (empty when it does not answer)."""

        def fetch() -> list[Any]:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    return list(text_string_to_metric_families(response.read().decode()))
            except OSError:
                return []

        return await asyncio.to_thread(fetch)
