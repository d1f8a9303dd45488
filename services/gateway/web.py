"""What a browser gets from the gateway besides the API: the web client at `/` (static files from
web/, no build step), the API documentation at `/docs` (Swagger UI) and `/redoc` (ReDoc) from
assets vendored in web/vendor/ (no CDN: they work offline), and, in development only, the sign-in
of dev_signin.py.

The page talks to the public `/api` routes only. Each HTML page carries a Content-Security-Policy
of its own (SecurityHeaders keeps a CSP a response sets); every other response keeps the API's
`default-src 'none'`, which a script or stylesheet loaded as a subresource never consults.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from services.gateway import dev_signin
from services.gateway.config import GatewaySettings
from services.gateway.errors import ApiError

log = logging.getLogger(__name__)

WEB_ROOT = Path(__file__).resolve().parents[2] / "web"
# Where web/ is served; the page's own files and the vendored documentation assets.
ASSETS = "/web"
# web/vendor/<name>: pinned by web/vendor/update.sh (versions, licences, SHA256SUMS).
SWAGGER_UI = "vendor/swagger-ui-dist-5.35.0"
REDOC = "vendor/redoc-2.5.4"

# The web client: its own scripts, styles and images, calls to this origin only; no inline
# script or style, no eval, no plugin, no frame; DOM sinks take no strings (Trusted Types) but
# through one policy, the Markdown sanitizer's (DOMPurify creates "dompurify" first, at import:
# no other code can create a policy of that name, nor any other).
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; manifest-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; "
    "trusted-types dompurify"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def install(app: FastAPI, settings: GatewaySettings) -> None:
    """Add the web client, the offline documentation pages and (dev only) /dev/token."""
    index = WEB_ROOT / "index.html"
    if not index.is_file():
        log.warning("no web client at %s: / and the documentation pages answer 404", WEB_ROOT)
    app.mount(ASSETS, _Assets(directory=WEB_ROOT, check_dir=False), name="web")

    @app.get("/", include_in_schema=False)
    async def web_client() -> Response:
        if not index.is_file():
            raise ApiError.not_found("the web client is not installed (web/index.html)")
        page = FileResponse(index, media_type="text/html; charset=utf-8")
        page.headers["Content-Security-Policy"] = PAGE_CSP
        page.headers["Cache-Control"] = "no-cache"
        return page

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/{SWAGGER_UI}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/{SWAGGER_UI}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.svg",
            oauth2_redirect_url=None,  # bearer tokens only: no OAuth2 flow to come back from
            # No badge asking validator.swagger.io about the document.
            swagger_ui_parameters={"validatorUrl": None},
        )
        return _with_csp(page, styles="'self' 'unsafe-inline'")

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/{REDOC}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.svg",
            with_google_fonts=False,
        )
        # ReDoc's search index runs in a worker it makes from a blob: URL.
        return _with_csp(page, styles="'self' 'unsafe-inline'", extra="worker-src blob:; ")

    key = dev_signin.signing_key(settings)
    if key is not None:
        app.include_router(dev_signin.router(settings, *key))


class _Assets(StaticFiles):
    """web/ as static files: the page's own revalidated on every load (an update shows at once),
    the vendored assets (versioned directories) cached for a day."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if response.status_code in (200, 304):
            vendored = path.startswith("vendor/")
            response.headers["Cache-Control"] = "public, max-age=86400" if vendored else "no-cache"
        return response


def _with_csp(page: HTMLResponse, *, styles: str, extra: str = "") -> HTMLResponse:
    """A documentation page's CSP: scripts and stylesheets from this origin plus the hash of each
    inline script of the page (computed from it, so it follows FastAPI's template), the OpenAPI
    document fetched from here; nothing loads from anywhere else, nothing frames it. Swagger UI
    and ReDoc set style attributes from their scripts: inline styles cannot be hashed."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(bytes(page.body).decode())
    )
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'self'{hashes}; style-src {styles}; "
        f"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; {extra}"
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    return page
