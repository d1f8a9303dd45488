"""A TCP proxy that can blackhole: a network partition or a half-open connection, on demand.

In `forward` mode every connection is relayed to the target. In `blackhole` mode:

- new connections are accepted (the kernel completes the handshake, as it would for a peer behind
  a partition whose SYN-ACK got through) and then never answered, forwarded or closed;
- connections already open stop relaying in both directions without being closed: what arrives is
  read and dropped, so neither end learns anything — only its own deadline gets it out.

In `refuse` mode the target looks down instead (a crashed server, a firewall that rejects): open
connections are reset and new ones are reset as soon as they are accepted, so clients fail fast.

Back in `forward` mode new connections work again. A connection that was blackholed stays dead:
the bytes it lost cannot be replayed into a protocol stream that moved on. Once the partition has
healed, each end of a dead connection learns the other is gone the next time it is heard from
(when one end closes, the proxy aborts the other), the way a TCP keepalive or a write finds out
after a real partition; while blackholed, a close is not passed on either.

Run in-process (`Proxy`) or as a process of its own (`python -m tests.chaos.harness.proxy --target
HOST:PORT`, driven by `ProxyProcess` through stdin), so relaying the services' traffic never
competes with the load generator's event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["forward", "blackhole", "refuse"]
_CHUNK = 65_536
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class ProxyStats:
    accepted: int = 0
    # Connections cut by a blackhole: open at the switch, or accepted while it lasted.
    blackholed: int = 0
    refused: int = 0  # connections reset by `refuse`
    forwarded_bytes: int = 0
    dropped_bytes: int = 0
    open: int = 0


@dataclass(eq=False)
class _Link:
    """One client connection and, when it was accepted in forward mode, its upstream."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    dead: bool = False
    ended: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()

    def close(self) -> None:
        """End a live connection the way the closing end meant: what is buffered still goes."""
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()

    def end(self) -> None:
        if self.dead:
            self.abort()
        else:
            self.close()


class Proxy:
    """Relays 127.0.0.1:<port> to a target until told to blackhole (see the module docstring)."""

    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._port = port
        self._mode: Mode = "forward"
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._healed = asyncio.Event()
        self._healed.set()
        self.stats = ProxyStats()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def mode(self) -> Mode:
        return self._mode

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", self._port)
        return self.port

    def blackhole(self) -> None:
        self._mode = "blackhole"
        self._healed.clear()
        for link in self._links:
            if not link.dead:
                link.dead = True
                self.stats.blackholed += 1

    def refuse(self) -> None:
        self._mode = "refuse"
        self._healed.set()  # not a partition: ends learn at once
        for link in self._links:
            link.abort()
            self.stats.refused += 1

    def forward(self, *, reset: bool = False) -> None:
        """Heal. The dead connections one end of which gave up meanwhile are now seen to be gone
        (their pumps wake up and abort them); `reset` aborts every dead connection at once, as
        if each end got a reset on its next packet (the connections did not survive)."""
        self._mode = "forward"
        self._healed.set()
        if reset:
            for link in self._links:
                if link.dead:
                    link.abort()

    def command(self, command: str) -> bool:
        """Apply one control command (blackhole, refuse, forward, forward-reset, stats); False
        when it is not one."""
        if command == "blackhole":
            self.blackhole()
        elif command == "refuse":
            self.refuse()
        elif command in ("forward", "forward-reset"):
            self.forward(reset=command == "forward-reset")
        return command in ("blackhole", "refuse", "forward", "forward-reset", "stats")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._healed.set()  # so pumps waiting for the partition to end let go
        for link in list(self._links):
            link.abort()
            for task in link.tasks:
                task.cancel()
        tasks = [t for link in self._links for t in link.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        self.stats.open = len(self._links)
        try:
            if self._mode == "refuse":
                self.stats.refused += 1
                link.dead = True  # so the finally resets it rather than closing it politely
                return
            if self._mode == "blackhole":
                link.dead = True
                self.stats.blackholed += 1
                await self._pump(link, reader, None)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()  # target down: refuse, as the target itself would
                return
            link.upstream = up_writer
            if self.mode == "refuse":  # refused while connecting
                link.dead = True
                return
            if link.dead:  # blackholed while connecting
                await self._pump(link, reader, None)
                return
            link.tasks = [
                asyncio.create_task(self._pump(link, reader, up_writer)),
                asyncio.create_task(self._pump(link, up_reader, writer)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            self.stats.open = len(self._links)
            link.end()

    async def _pump(
        self, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None
    ) -> None:
        """Relay one direction; drop instead once the link is dead; on EOF end the link, unless
        it is dead and the partition still lasts (then the other end must not find out)."""
        try:
            while data := await src.read(_CHUNK):
                if link.dead or dst is None:
                    self.stats.dropped_bytes += len(data)
                    continue
                dst.write(data)
                self.stats.forwarded_bytes += len(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        link.ended = True
        if link.dead:
            await self._healed.wait()
        link.end()


class ProxyProcess:
    """A proxy in a child process, switched through its stdin; each command answers with its
    stats once the switch is done, so a fault starts only when the proxy has applied it."""

    def __init__(self, name: str, target_host: str, target_port: int) -> None:
        self.name = name
        self.target = (target_host, target_port)
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> int:
        self._proc = await asyncio.create_subprocess_exec(
            os.environ.get("PYTHON", str(ROOT / ".venv/bin/python")),
            "-m",
            "tests.chaos.harness.proxy",
            "--target",
            f"{self.target[0]}:{self.target[1]}",
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        reply = await self._reply()
        self.port = int(reply["port"])
        return self.port

    async def _reply(self) -> dict[str, int | str]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), 10)
        if not line:
            raise RuntimeError(f"proxy {self.name} exited")
        reply: dict[str, int | str] = json.loads(line)
        return reply

    async def command(self, command: str) -> dict[str, int | str]:
        assert self._proc is not None
        assert self._proc.stdin is not None
        async with self._lock:
            self._proc.stdin.write(f"{command}\n".encode())
            await self._proc.stdin.drain()
            return await self._reply()

    async def blackhole(self) -> dict[str, int | str]:
        return await self.command("blackhole")

    async def refuse(self) -> dict[str, int | str]:
        return await self.command("refuse")

    async def forward(self, *, reset: bool = False) -> dict[str, int | str]:
        return await self.command("forward-reset" if reset else "forward")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def stats(self) -> dict[str, int | str]:
        return await self.command("stats")

    async def stop(self) -> None:
        if self._proc is None or self._proc.returncode is not None:
            return
        assert self._proc.stdin is not None
        self._proc.stdin.close()  # EOF: the proxy exits
        try:
            await asyncio.wait_for(self._proc.wait(), 5)
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()


async def _serve(target: str, port: int) -> None:
    host, _, target_port = target.rpartition(":")
    proxy = Proxy(host, int(target_port), port=port)
    await proxy.start()
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)

    def answer() -> None:
        reply = {"port": proxy.port, "mode": proxy.mode, **asdict(proxy.stats)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()

    answer()
    # Until stdin closes: the proxy never outlives the harness that drives it.
    while line := await commands.readline():
        command = line.decode().strip()
        if not proxy.command(command):
            sys.stderr.write(f"unknown command {command!r}\n")
        answer()
    await proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT to relay to")
    parser.add_argument("--port", type=int, default=0, help="listen port (0: any free one)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.target, args.port))


if __name__ == "__main__":
    main()
