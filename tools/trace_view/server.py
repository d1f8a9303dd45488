"""The HTTP side of the trace view: stdlib ThreadingHTTPServer on 127.0.0.1, in a thread.

Same-origin only: no CORS headers, a Content-Security-Policy that allows scripts, styles and
fetches from this origin alone, and a Host check so a page elsewhere cannot read the traces
through DNS rebinding (services/runtime/loopback.py: the rule of the gateway's /dev/token too).
GET and HEAD only.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from contextlib import closing
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from services.runtime.loopback import is_local_request
from tools.trace_view.queries import recent_traces, trace_detail

DEFAULT_PORT = 16686
STATIC = Path(__file__).parent / "static"
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
    "/static/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
TRACE = re.compile(r"/api/traces/([0-9a-f]{32})")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class TraceViewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, db_path: Path, port: int) -> None:
        self.db_path = db_path
        super().__init__(("127.0.0.1", port), Handler)

    def read(self) -> sqlite3.Connection:
        """A read-only connection for one request (the sink writes through its own, WAL)."""
        return sqlite3.connect(f"{self.db_path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)


class Handler(BaseHTTPRequestHandler):
    server: TraceViewServer
    server_version = "agora-trace-view"
    sys_version = ""

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the sink's log is for the sink (errors still go through log_error)."""

    def _respond(self, head: bool) -> None:
        if not is_local_request(self.client_address[0], self.headers.get("Host")):
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown host\n", "text/plain", head)
            return
        url = urlsplit(self.path)
        if url.path in FILES:
            name, content_type = FILES[url.path]
            self._send(HTTPStatus.OK, (STATIC / name).read_bytes(), content_type, head)
            return
        try:
            if url.path == "/api/traces":
                query = parse_qs(url.query)
                limit = query.get("limit", ["50"])[0]
                if not limit.isdigit():
                    self._json(HTTPStatus.BAD_REQUEST, {"error": "limit: a number"}, head)
                    return
                service = query.get("service", [""])[0]
                with closing(self.server.read()) as db:
                    self._json(HTTPStatus.OK, recent_traces(db, int(limit), service), head)
                return
            if url.path.startswith("/api/traces/"):
                match = TRACE.fullmatch(url.path)
                if match is None:
                    self._json(HTTPStatus.BAD_REQUEST, {"error": "a trace id: 32 hex digits"}, head)
                    return
                with closing(self.server.read()) as db:
                    detail = trace_detail(db, match.group(1))
                if detail is None:
                    self._json(HTTPStatus.NOT_FOUND, {"error": "no such trace (yet)"}, head)
                else:
                    self._json(HTTPStatus.OK, detail, head)
                return
        except sqlite3.Error as e:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"trace database: {e}"}, head)
            return
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head)

    def _json(self, status: HTTPStatus, body: object, head: bool) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", head)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def start(db_path: Path, port: int = DEFAULT_PORT) -> TraceViewServer:
    """Serve the view of db_path on 127.0.0.1:port (0: any free port) from a daemon thread."""
    server = TraceViewServer(db_path, port)
    threading.Thread(
        target=server.serve_forever, args=(0.2,), name="trace-view", daemon=True
    ).start()
    return server


def stop(server: TraceViewServer) -> None:
    server.shutdown()
    server.server_close()
