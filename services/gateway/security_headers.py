"""Browser-facing response headers: the standard hardening set on every response, and the API
documentation page with a Content-Security-Policy that lets exactly its own assets load."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
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

# Swagger UI's assets (FastAPI's defaults) and the one origin they come from.
ASSET_ORIGIN = "https://cdn.jsdelivr.net"
SWAGGER_JS = f"{ASSET_ORIGIN}/npm/swagger-ui-dist@5/swagger-ui-bundle.js"
SWAGGER_CSS = f"{ASSET_ORIGIN}/npm/swagger-ui-dist@5/swagger-ui.css"
FAVICON = "https://fastapi.tiangolo.com/img/favicon.png"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


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


def docs_page(openapi_url: str, title: str) -> HTMLResponse:
    """Swagger UI, with a CSP that allows its script and stylesheet origin, the hash of its one
    inline script (computed from the page, so it follows FastAPI's template) and fetching the
    OpenAPI document from here; nothing else loads, and nothing frames it."""
    page = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title} - Swagger UI",
        swagger_js_url=SWAGGER_JS,
        swagger_css_url=SWAGGER_CSS,
        swagger_favicon_url=FAVICON,
        oauth2_redirect_url=None,  # bearer tokens only: no OAuth2 flow to come back from
    )
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(bytes(page.body).decode())
    )
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src {ASSET_ORIGIN} {hashes}; "
        # Swagger UI sets style attributes from its scripts: inline styles cannot be hashed.
        f"style-src {ASSET_ORIGIN} 'unsafe-inline'; img-src 'self' data: {FAVICON}; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    return page
