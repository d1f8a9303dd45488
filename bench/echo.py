"""Echo servers: the irreducible cost of a call, in the same run as the real one.

A separate process (as the services are) serves pre-built answers and does nothing else:

- gRPC: one grpc.aio server per page on its own port, with the same grpcio, the same mTLS server
  credentials (var/tls/<identity>.pem, client certificate required) and the same message size
  options as the services; every method answers the captured, already serialized response, so
  the client pays exactly what it pays for the real page (TLS, HTTP/2, deserializing the same
  bytes), and the server pays framing only;
- HTTP: one uvicorn server (the gateway's uvicorn, the same Config and event loop) with a bare
  ASGI app answering the captured JSON bytes of the page whose path prefix matches;
- relay (the browser path's echo): the gateway's HTTP stack (FastAPI on the same uvicorn Config)
  answering every GET with one ListMessages call over an mTLS channel opened as the gateway opens
  its own, to a gRPC echo of the page, and the gateway's JSON conversion of the reply: what a
  timeline page route costs with nothing behind it and no auth, tracing or middleware in front.

    python -m bench.echo --identity timeline --grpc 50111=/tmp/x/first.bin \\
        --http-port 50112 --http /api/courses/=/tmp/x/feed.json
    python -m bench.echo --identity gateway --relay-port 50113 --relay-to 127.0.0.1:50111

prints `ready` once everything listens. The bench starts it with `echo_servers(...)`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.common import ROOT
from tools.callers import material
from tools.ports import free_port

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Echo(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of every service: the same serialized response (no (de)serializer)."""

    def __init__(self, body: bytes) -> None:
        self._handler = grpc.unary_unary_rpc_method_handler(self._reply)
        self._body = body

    async def _reply(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return self._body

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return self._handler


def http_app(routes: list[tuple[str, bytes]]) -> AsgiApp:
    """A bare ASGI app: the body of the first route whose prefix the path starts with."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        # Read the request body, as any route that takes one does.
        while (await receive()).get("more_body", False):
            pass
        path = scope.get("path", "")
        body = next((b for prefix, b in routes if path.startswith(prefix)), b"{}")
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


async def _uvicorn(app: Any, port: int, http: str = "auto") -> asyncio.Task[None]:
    """`app` on the gateway's uvicorn Config, once it listens (`http`: uvicorn's parser choice,
    "auto" as the gateway runs it: httptools when installed)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        loop="none",
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            raise SystemExit(f"the HTTP server on {port} did not start")
        await asyncio.sleep(0.02)
    return task


async def serve(
    identity: str,
    grpc_pages: list[tuple[int, bytes]],
    http_port: int,
    routes: list[tuple[str, bytes]],
    relay: tuple[int, str] | None = None,
    http_parser: str = "auto",
) -> None:
    servers = []
    credentials = material(identity).server_credentials()
    for port, body in grpc_pages:
        server = grpc.aio.server(options=_GRPC_OPTIONS)
        server.add_generic_rpc_handlers((_Echo(body),))
        server.add_secure_port(f"127.0.0.1:{port}", credentials)
        await server.start()
        servers.append(server)
    https: list[asyncio.Task[None]] = []
    if http_port:
        https.append(await _uvicorn(http_app(routes), http_port, http_parser))
    if relay is not None:
        from bench.relay import relay_app

        port, target = relay
        https.append(await _uvicorn(relay_app(target, material(identity)), port, http_parser))
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()  # until the bench terminates this process
    finally:
        for http in https:
            http.cancel()
        for server in servers:
            await server.stop(0)


@dataclass
class EchoAddresses:
    """Where the echo process listens: a gRPC address per page name, and the HTTP port."""

    grpc: dict[str, str] = field(default_factory=dict)
    http_port: int = 0
    relay_port: int = 0


@contextlib.asynccontextmanager
async def echo_servers(
    *,
    grpc_pages: dict[str, bytes] | None = None,
    http_pages: dict[str, bytes] | None = None,
    identity: str = "timeline",
    relay_to: str = "",
    http_parser: str = "auto",
    event_loop: str = "uvloop",
) -> AsyncIterator[EchoAddresses]:
    """Start the echo process: `grpc_pages` name → serialized response (one port each),
    `http_pages` path prefix → JSON bytes (one port for all), `relay_to`: a gRPC echo's address
    the relay calls (relay_port); `http_parser` and `event_loop` as uvicorn and the services
    choose them (httptools when installed, uvloop) unless a comparison asks otherwise."""
    addresses = EchoAddresses()
    argv = [sys.executable, "-m", "bench.echo", "--identity", identity]
    argv += ["--http-parser", http_parser, "--event-loop", event_loop]
    with tempfile.TemporaryDirectory(prefix="bench-echo-") as tmp:
        for i, (name, body) in enumerate((grpc_pages or {}).items()):
            path = Path(tmp) / f"grpc-{i}.bin"
            path.write_bytes(body)
            port = free_port()
            addresses.grpc[name] = f"127.0.0.1:{port}"
            argv += ["--grpc", f"{port}={path}"]
        if http_pages:
            addresses.http_port = free_port()
            argv += ["--http-port", str(addresses.http_port)]
            for i, (prefix, body) in enumerate(http_pages.items()):
                path = Path(tmp) / f"http-{i}.json"
                path.write_bytes(body)
                argv += ["--http", f"{prefix}={path}"]
        if relay_to:
            addresses.relay_port = free_port()
            argv += ["--relay-port", str(addresses.relay_port), "--relay-to", relay_to]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise SystemExit("the echo servers did not start (see stderr above)")
            yield addresses
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--identity", default="timeline", help="var/tls certificate to serve")
    parser.add_argument("--grpc", action="append", default=[], help="PORT=FILE")
    parser.add_argument("--http-port", type=int, default=0)
    parser.add_argument("--http", action="append", default=[], help="PATH_PREFIX=FILE")
    parser.add_argument("--relay-port", type=int, default=0)
    parser.add_argument("--relay-to", default="", help="the gRPC echo the relay calls")
    parser.add_argument("--http-parser", default="auto", choices=("auto", "h11", "httptools"))
    parser.add_argument("--event-loop", default="uvloop", choices=("uvloop", "asyncio"))
    args = parser.parse_args()
    from services.runtime.process import run

    grpc_pages = []
    for spec in args.grpc:
        port, path = spec.split("=", 1)
        grpc_pages.append((int(port), Path(path).read_bytes()))
    routes = []
    for spec in args.http:
        prefix, path = spec.split("=", 1)
        routes.append((prefix, Path(path).read_bytes()))
    with contextlib.suppress(KeyboardInterrupt):
        relay = (args.relay_port, args.relay_to) if args.relay_port else None

        def main() -> Coroutine[Any, Any, None]:
            return serve(args.identity, grpc_pages, args.http_port, routes, relay, args.http_parser)

        if args.event_loop == "asyncio":
            asyncio.run(main())
        else:
            run(main)


if __name__ == "__main__":
    main()
