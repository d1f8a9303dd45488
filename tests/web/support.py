"""What the web tests share: gateway settings that need no upstream, and a Chromium page that
records every request, refuses any that would leave 127.0.0.1, and keeps its screenshots."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Page,
    Route,
    ViewportSize,
    async_playwright,
    expect,
)

from services.gateway.config import GatewaySettings
from tests.helpers import ROOT
from tools import callers

SECRET = "web-test-secret-at-least-32-bytes-long!"
AUD, ISS = "agora-web-test", "agora-web-test-issuer"
# Debian's Chromium (the project's set-up installs it); Playwright never downloads a browser.
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
OUTPUT = ROOT / "tests" / "output" / "web"
# One screenshot of each screen for the README, refreshed only when asked:
# UPDATE_SCREENSHOTS=1 make test PYTEST_ARGS=tests/web
README_SCREENSHOTS = ROOT / "docs" / "screenshots"
VIEWPORT = ViewportSize(width=1280, height=800)
# Waits for a page to reach a state (the flusher applies marks and likes asynchronously).
expect.set_options(timeout=15_000)


def settings(**values: Any) -> GatewaySettings:
    """Gateway settings pointing nowhere (nothing these tests ask calls an upstream); explicit
    values win over the environment `make test` exports (the local stack's, dev mode on)."""
    base: dict[str, Any] = {
        "jwt_keys": {},
        "jwt_secret": SECRET,
        "jwt_secret_kid": "web",
        "jwt_audience": AUD,
        "jwt_issuer": ISS,
        "jwt_dev_mode": False,
        "ingest_addr": "127.0.0.1:1",
        "ingest_forum_addr": "127.0.0.1:1",
        "timeline_addr": "127.0.0.1:1",
        "likes_addr": "127.0.0.1:1",
        "redis_url": "redis://127.0.0.1:1/0",
        **callers.tls_files("gateway"),
    }
    return GatewaySettings(**{**base, **values})


@dataclass
class Watched:
    """A page and what it did: every URL it asked for, those refused for leaving the machine,
    uncaught errors, and Content-Security-Policy violations."""

    page: Page
    requests: list[str] = field(default_factory=list)
    offsite: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def screenshot(self, name: str) -> Path:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        path = OUTPUT / f"{name}.png"
        await self.page.screenshot(path=str(path))
        if os.environ.get("UPDATE_SCREENSHOTS") == "1":
            README_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, README_SCREENSHOTS / path.name)
        return path

    def assert_clean(self, *, blocked_by_csp: tuple[str, ...] = ()) -> None:
        """Nothing asked for outside 127.0.0.1, no uncaught error, no CSP violation but the
        loads of `blocked_by_csp` (URLs the CSP refused, so never requested; each was tried)."""
        assert not self.offsite, f"requests left 127.0.0.1: {self.offsite}"
        expected = [e for e in self.errors if any(f"'{url}'" in e for url in blocked_by_csp)]
        assert len(expected) >= len(blocked_by_csp), (blocked_by_csp, self.errors)
        assert [e for e in self.errors if e not in expected] == []
        assert self.requests


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the browser tests drive Debian's chromium package")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    require_chromium()
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def watched_page(
    browser: Browser, viewport: ViewportSize = VIEWPORT, *, phone: bool = False
) -> AsyncIterator[Watched]:
    """A watched page in a new context of `viewport` (`phone`: a touch screen that reports
    itself as mobile)."""
    context = await browser.new_context(
        viewport=viewport,
        locale="vi-VN",
        timezone_id="UTC",
        is_mobile=phone,
        has_touch=phone,
    )
    context.set_default_timeout(15_000)
    page = await context.new_page()
    watched = Watched(page)

    async def only_loopback(route: Route) -> None:
        url = route.request.url
        watched.requests.append(url)
        if urlsplit(url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            watched.offsite.append(url)
            await route.abort("blockedbyclient")

    def console(message: ConsoleMessage) -> None:
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text or "TrustedHTML" in text:
            watched.errors.append(f"CSP: {text}")

    await context.route("**/*", only_loopback)
    page.on("console", console)
    page.on("pageerror", lambda error: watched.errors.append(f"uncaught: {error}"))
    try:
        yield watched
    finally:
        await context.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def opened_at(browser: Browser, url: str) -> AsyncIterator[tuple[Watched, Page]]:
    """A watched page, on `url`."""
    async with watched_page(browser) as watched:
        await watched.page.goto(url)
        yield watched, watched.page


async def sign_in(watched: Watched, base: str, user: int, *, shot: str | None = None) -> None:
    """The sign-in page, then the demo user `user` (the development gateway mints the token)."""
    page = watched.page
    await page.goto(f"{base}/")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    demo = page.locator(f'.demo-user[data-sub="{user}"]')
    await expect(demo).to_be_visible()
    if shot:
        await watched.screenshot(shot)
    await demo.click()
    await expect(page.locator("#who")).to_have_attribute("data-user", str(user))


@asynccontextmanager
async def signed_in(browser: Browser, base: str, user: int, at: str = "") -> AsyncIterator[Watched]:
    """A watched page signed in as the demo user `user`, then on `at` (a route of the web client,
    "/#/…") when one is given."""
    async with watched_page(browser) as watched:
        await sign_in(watched, base, user)
        if at:
            await watched.page.goto(f"{base}{at}")
        yield watched


async def new_post(
    api: httpx.AsyncClient, title: str, body: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """A post in course 42 (the forum lab's), by `headers`' user or else the client's own."""
    return await api.post(
        "/api/courses/42/posts", json={"title": title, "body": body}, headers=headers
    )


def conversation(thread: str, count: int, start: datetime) -> list[dict[str, Any]]:
    """`count` messages a minute apart (every fifth at the same instant as the one before, so
    the (sent_at, id) cursor shows), two incoming for one outgoing, every tenth quoting the one
    before; Vietnamese text and emoji."""
    messages = []
    for i in range(count):
        step = i - 1 if i % 5 == 1 else i
        incoming = i % 3 != 2
        message: dict[str, Any] = {
            "msg_id": f"{thread}-{i}",
            "thread_id": thread,
            "direction": "in" if incoming else "out",
            "sender_id": "khach-1" if incoming else "shop",
            "sender_name": "Nguyễn Thị Hoa" if incoming else "Cửa hàng Demo",
            "content": f"Tin nhắn số {i}: xin chào, cảm ơn bạn 😀👍",
            "msg_type": "webchat",
            "sent_at": (start + timedelta(minutes=step)).isoformat(),
        }
        if i % 10 == 9:
            message["quote"] = {
                "msg_id": f"{thread}-{i - 1}",
                "payload": {"msg": f"Tin nhắn số {i - 1}: xin chào, cảm ơn bạn 😀👍"},
            }
        messages.append(message)
    return messages


async def set_hidden(page: Page, hidden: bool) -> None:
    """The tab hidden (or shown again) as the page sees it: document.visibilityState and a
    visibilitychange event, as a browser gives when the person switches tabs."""
    await page.evaluate(
        """(hidden) => {
            Object.defineProperty(document, 'visibilityState',
                {configurable: true, get: () => (hidden ? 'hidden' : 'visible')});
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
            document.dispatchEvent(new Event('visibilitychange'));
        }""",
        hidden,
    )


# Every `new Notification(…)` of the page, kept in window.notifications (the browser's own is
# not shown by a headless Chromium); its permission is the context's.
CAPTURE_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.notifications = [];
  class Captured {
    constructor(title, options = {}) {
      window.notifications.push({ title, body: options.body ?? null, tag: options.tag ?? null });
      this.title = title;
      this.onclick = null;
    }
    close() {}
    static get permission() { return Real ? Real.permission : 'denied'; }
    static requestPermission(...args) { return Real.requestPermission(...args); }
  }
  window.Notification = Captured;
})();
"""
