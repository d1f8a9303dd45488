"""The web client's files, the offline documentation pages and the development sign-in, through
the gateway app in process (no upstream is called: these routes need none)."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urljoin

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi import FastAPI

from services.gateway import dev_signin, web
from services.gateway.app import create_app
from services.gateway.security_headers import API_CSP
from tests.web.support import AUD, ISS, settings
from tools.people_data import DEMO_PEOPLE

pytestmark = pytest.mark.asyncio


@asynccontextmanager
async def client(app: FastAPI, peer: str = "127.0.0.1") -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as c:
        yield c


async def test_dev_token_mints_a_short_lived_token_the_gateway_accepts() -> None:
    app = create_app(settings(jwt_dev_mode=True))
    async with client(app) as c:
        listed = await c.get("/dev/token")
        assert listed.status_code == 200, listed.text
        assert {"sub": 7, "accounts": [1, 2]}.items() <= listed.json()["data"]["demo_users"][
            0
        ].items()
        minted = await c.post("/dev/token", json={"sub": 7, "accounts": [2, 1, 2]})
        assert minted.status_code == 201, minted.text
        assert minted.headers["cache-control"] == "no-store"
        token = minted.json()["data"]["token"]
        principal = app.state.token_verifier.verify(token)
        assert (principal.user_id, principal.accounts) == (7, frozenset({1, 2}))
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["exp"] - claims["iat"] == dev_signin.DEV_TOKEN_TTL_SECONDS
        # A demo person's token names them, as an identity provider's `name` claim would.
        assert claims["name"] == DEMO_PEOPLE[7]
        assert (claims["aud"], claims["iss"]) == (AUD, ISS)
        assert jwt.get_unverified_header(token)["kid"] == "web"
        # The token opens /api (401 without it); the route then needs an upstream, not asked here.
        assert (await c.get("/api/courses/42/posts")).status_code == 401
        refused = await c.post("/dev/token", json={"sub": 0, "accounts": ["x"]})
        assert refused.status_code == 422
        assert {f["field"] for f in refused.json()["error"]["fields"]} == {"sub", "accounts.0"}
    # A development gateway reachable from a network does not hand tokens out.
    async with client(app, peer="10.1.2.3") as c:
        for response in (await c.get("/dev/token"), await c.post("/dev/token", json={"sub": 7})):
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "permission_denied"


async def test_no_dev_token_without_dev_mode_or_without_an_hs256_key() -> None:
    public = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    for name, app in {
        "production settings": create_app(settings()),
        "dev mode, EdDSA key only": create_app(
            settings(jwt_dev_mode=True, jwt_secret=None, jwt_keys={"ed": public})
        ),
    }.items():
        async with client(app) as c:
            for response in (
                await c.get("/dev/token"),
                await c.post("/dev/token", json={"sub": 7, "accounts": [1]}),
            ):
                assert response.status_code == 404, name
                assert response.json()["success"] is False, name


async def test_the_page_loads_only_its_own_files_under_its_own_csp() -> None:
    app = create_app(settings())
    async with client(app) as c:
        page = await c.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"] == web.PAGE_CSP
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        policy = directives(web.PAGE_CSP)
        assert policy["script-src"] == policy["style-src"] == policy["connect-src"] == ["'self'"]
        assert "<script>" not in page.text
        assert " style=" not in page.text
        # Every file the page needs, and every module those import, is served with its type.
        pending = re.findall(r'(?:src|href)="(web/[^"]+)"', page.text)
        seen: set[str] = set()
        while pending:
            path = pending.pop()
            if path in seen:
                continue
            seen.add(path)
            response = await c.get("/" + path)
            assert response.status_code == 200, path
            kind = {"js": "text/javascript", "mjs": "text/javascript", "css": "text/css"}
            kind["svg"] = "image/svg+xml"
            assert response.headers["content-type"].startswith(kind[path.rsplit(".", 1)[1]])
            if path.startswith("web/vendor/"):
                # Pinned third-party modules (the Markdown renderer and its sanitizer, which
                # works on an inert document of its own): versioned paths, cached for a day.
                assert response.headers["cache-control"] == "public, max-age=86400", path
                continue
            assert response.headers["cache-control"] == "no-cache"
            if path.endswith(".js"):
                assert "innerHTML" not in response.text, path
                # Live updates are read with fetch, the token in its header: an EventSource could
                # only carry it in the URL.
                assert "new EventSource" not in response.text, path
                for module in re.findall(r"from '(\.[^']+)'", response.text):
                    pending.append(urljoin(path, module))
        assert {"web/app.js", "web/js/inbox.js", "web/js/forum.js", "web/js/live.js"} <= seen
        assert {
            "web/vendor/marked-18.3.0/marked.esm.js",
            "web/vendor/dompurify-3.5.0/purify.es.mjs",
        } <= seen
        assert "web/style.css" in seen
        # The API's own headers are unchanged.
        for response in (await c.get("/healthz"), await c.get("/api/courses/42/posts")):
            assert response.headers["content-security-policy"] == API_CSP
        assert (await c.get("/web/%2e%2e/services/gateway/web.py")).status_code == 404


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
async def test_the_documentation_pages_load_everything_from_the_gateway(path: str) -> None:
    app = create_app(settings())
    async with client(app) as c:
        page = await c.get(path)
        assert page.status_code == 200
        policy = directives(page.headers["content-security-policy"])
        assert policy["default-src"] == ["'none'"]
        assert policy["connect-src"] == ["'self'"]
        assert policy["frame-ancestors"] == ["'none'"]
        for sources in policy.values():
            assert not [s for s in sources if s.startswith("http")], sources
        assert "'unsafe-inline'" not in policy["script-src"]
        assert "'unsafe-eval'" not in policy["script-src"]
        for script in re.findall(r"<script>(.*?)</script>", page.text, re.S):
            digest = hashlib.sha256(script.encode()).digest()
            assert f"'sha256-{base64.b64encode(digest).decode()}'" in policy["script-src"]
        urls = re.findall(r'(?:src|href|url|spec-url)\s*[=:]\s*["\']([^"\']+)["\']', page.text)
        assert urls
        for url in urls:
            assert url.startswith("/"), url
            response = await c.get(url)
            assert response.status_code == 200, url
        assert "https://" not in page.text


async def test_vendored_assets_are_the_pinned_ones_with_their_licences() -> None:
    vendor = web.WEB_ROOT / "vendor"
    sums = (vendor / "SHA256SUMS").read_text().splitlines()
    listed = {}
    for line in sums:
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    on_disk = {
        str(p.relative_to(vendor)) for p in vendor.rglob("*") if p.is_file() and p.parent != vendor
    }
    assert on_disk == set(listed)
    for directory in (web.SWAGGER_UI, web.REDOC, "vendor/marked-", "vendor/dompurify-"):
        [pinned] = web.WEB_ROOT.glob(f"{directory}*")
        assert (pinned / "LICENSE").is_file(), pinned
    # The pins of update.sh name the directories the gateway serves.
    script = (vendor / "update.sh").read_text()
    version = re.search(r"SWAGGER_UI_VERSION=(\S+)", script)
    redoc = re.search(r"REDOC_VERSION=(\S+)", script)
    assert version
    assert redoc
    assert f"vendor/swagger-ui-dist-{version[1]}" == web.SWAGGER_UI
    assert f"vendor/redoc-{redoc[1]}" == web.REDOC
    markdown = (web.WEB_ROOT / "js" / "markdown.js").read_text()
    for package in ("marked", "dompurify"):
        pin = re.search(rf"{package.upper()}_VERSION=(\S+)", script)
        assert pin
        assert f"vendor/{package}-{pin[1]}/" in markdown, package


def directives(csp: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in csp.split("; ")}


async def test_the_demo_people_are_named_as_the_directory_names_them() -> None:
    """The sign-in lists people by the names the rest of the page shows for them, with what each
    may do; users 7 and 8 share Zalo account 1 (two agents of one inbox)."""
    users = {user["sub"]: user for user in dev_signin.DEMO_USERS}
    assert {sub: user["name"] for sub, user in users.items()} == DEMO_PEOPLE
    assert all(user["role"] for user in users.values())
    assert (users[1]["accounts"], users[7]["accounts"], users[8]["accounts"]) == (
        [1, 2, 3],
        [1, 2],
        [1, 3],
    )
    assert users[9]["accounts"] == []
