"""Browser-facing response headers: the standard hardening set on every response (the pages of
web.py set a Content-Security-Policy of their own)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# JSON is all the API serves: nothing in a response may load, run, frame it or be framed.
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
HEADERS: tuple[tuple[str, str], ...] = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", API_CSP),
)


def hardening(*, hsts_seconds: int) -> tuple[tuple[str, str], ...]:
    """The headers every response gets. HSTS only where the gateway is reached over TLS (it
    would pin a plain-HTTP development host to HTTPS in the browser for max-age)."""
    if hsts_seconds <= 0:
        return HEADERS
    return (*HEADERS, ("Strict-Transport-Security", f"max-age={hsts_seconds}; includeSubDomains"))


class SecurityHeaders:
    """ASGI middleware: adds `headers` to every HTTP response that does not set them itself
    (the documentation page sets its own CSP), and `Cache-Control: no-store` to /api responses,
    which hold one user's data."""

    def __init__(self, app: ASGIApp, *, headers: tuple[tuple[str, str], ...]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Also under a root path a proxy mounts the gateway at; a stray no-store costs nothing.
        api = "/api/" in scope["path"] or scope["path"].endswith("/api")

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers:
                    headers.setdefault(name, value)
                if api:
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        await self.app(scope, receive, send_hardened)
