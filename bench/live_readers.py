"""Event-stream readers for the live bench, in a process of their own: python -m bench.live_readers.

Thousands of SSE readers in the process that also sends the messages would measure the bench's
own event loop: the sender falls behind and the latency it reports is its own. So the bench runs
the readers here, on bare sockets with h11 (an idle reader costs a few KB, not an HTTP client's
connection pool), and talks to them over stdin/stdout:

  stdin:  one JSON line {"port": 8080, "streams": [{"path": "/api/…/events", "token": "…"}, …]},
          later a line "stop"
  stdout: "opened <n> refused <m>" once every stream has its answer, then one JSON line: every
          message event's (stream, msg_id, time.monotonic()), the count of events by kind, and
          the bytes of every tenth event on the wire.

time.monotonic() is one clock for every process of the machine (CLOCK_MONOTONIC), so the times
compare with the sender's acknowledgements.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter

import h11
import orjson


class Reader:
    """What the readers saw, all streams together."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, str, float]] = []
        self.kinds: Counter[str] = Counter()
        # Each event's bytes on the wire (its id, event and data lines): every 10th, enough for
        # the percentiles.
        self.sizes: list[int] = []
        self.events = 0
        self.opened = 0
        self.refused = 0

    def on_event(self, stream: int, kind: str, data: str, size: int) -> None:
        self.kinds[kind] += 1
        self.events += 1
        if self.events % 10 == 0:
            self.sizes.append(size)
        if kind == "message":
            self.messages.append((stream, orjson.loads(data)["msg_id"], time.monotonic()))


async def follow(
    reader: Reader, stream: int, port: int, path: str, token: str, answered: asyncio.Event
) -> None:
    """One stream, read until it ends or the task is cancelled."""
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        reader.refused += 1
        answered.set()
        return
    conn = h11.Connection(h11.CLIENT)
    headers = [
        ("Host", "127.0.0.1"),
        ("Authorization", f"Bearer {token}"),
        ("Accept", "text/event-stream"),
    ]
    w.write(conn.send(h11.Request(method="GET", target=path, headers=headers)))
    w.write(conn.send(h11.EndOfMessage()))
    buffer, kind, data, size = b"", "", "", 0
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                chunk = await r.read(65536)
                conn.receive_data(chunk)
                if not chunk:
                    return
                continue
            if isinstance(event, h11.Response):
                if event.status_code == 200:
                    reader.opened += 1
                else:
                    reader.refused += 1
                answered.set()
                if event.status_code != 200:
                    return
            elif isinstance(event, h11.Data):
                buffer += bytes(event.data)
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    size += len(raw) + 1
                    line = raw.decode().rstrip("\r")  # a server may end lines with CRLF
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        data = line[6:]
                    elif not line:
                        if kind:
                            reader.on_event(stream, kind, data, size)
                        kind, data, size = "", "", 0
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
    except (OSError, h11.ProtocolError):
        return
    finally:
        answered.set()
        w.close()


async def main() -> None:
    loop = asyncio.get_running_loop()
    spec = orjson.loads(await loop.run_in_executor(None, sys.stdin.readline))
    reader = Reader()
    tasks: list[asyncio.Task[None]] = []
    answers: list[asyncio.Event] = []
    for i, stream in enumerate(spec["streams"]):
        answered = asyncio.Event()
        answers.append(answered)
        tasks.append(
            asyncio.create_task(
                follow(reader, i, spec["port"], stream["path"], stream["token"], answered)
            )
        )
        if i % 100 == 99:
            # Opened in steps: a listen backlog full of SYNs is not what this measures.
            await asyncio.gather(*(a.wait() for a in answers[-100:]))
    await asyncio.gather(*(a.wait() for a in answers))
    print(f"opened {reader.opened} refused {reader.refused}", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)
    sys.stdout.write(
        orjson.dumps(
            {"messages": reader.messages, "kinds": reader.kinds, "sizes": reader.sizes}
        ).decode()
        + "\n"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
