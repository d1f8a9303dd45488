"""The web client fits the person using it (web/README.md), in Debian's Chromium through
Playwright against every service as a process: on a phone (390×844) the list and the open
conversation are two screens with a back control, the header is one line and nothing widens the
page (the History popover included); the title and headings say where you are; popovers close on
Escape and on a click outside, and "Who liked" follows your unlike; the conversation list is one
Tab stop that the arrow keys move through, after a skip link; loading and offline texts are in
the user's terms; the development sign-in is kept by a second tab and a sign-out there is
followed; and axe-core (tools/axe, from npm) finds no serious or critical violation on the inbox,
an open conversation and the forum at 1280×900 and at 390×844."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Route, ViewportSize, expect

from tests.helpers import ROOT, mint_token
from tests.stack import Env
from tests.web.support import bearer, conversation, sign_in, watched_page
from tests.web.test_live import LIVE, stored

pytestmark = pytest.mark.asyncio

PHONE = ViewportSize(width=390, height=844)
DESKTOP = ViewportSize(width=1280, height=900)
# The open conversation's title, with the unread count of the inbox (it falls as it is read).
TITLE_WITH_A_COUNT = re.compile(r"^\(\d+\) Nguyễn Thị Hoa — Inbox — Zalo account 1 — agora$")
AXE = ROOT / "tools" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
FIRST, SECOND = "fit-first", "fit-second"


async def two_conversations(stack: str, env: Env) -> None:
    """Two conversations on Zalo account 1 (FIRST has the newest activity), stored."""
    now = datetime.now(UTC).replace(microsecond=0)
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    async with httpx.AsyncClient(base_url=stack, headers=bearer(token)) as api:
        messages = conversation(SECOND, 6, now - timedelta(hours=2)) + conversation(
            FIRST, 4, now - timedelta(minutes=30)
        )
        reply = await api.post("/api/zalo-accounts/1/messages", json={"messages": messages})
        assert reply.json()["data"]["accepted"] == len(messages), reply.text
        await stored(api, SECOND, 6)
        await stored(api, FIRST, 4)


async def no_horizontal_scroll(page: Page, where: str) -> None:
    widths = await page.evaluate(
        """() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
                  body: document.body.scrollWidth})"""
    )
    assert widths["scroll"] <= widths["inner"], (where, widths)
    assert widths["body"] <= widths["inner"], (where, widths)


async def header_is_one_line(page: Page) -> None:
    """Every visible item of the sticky header on one row, the header no taller than a line."""
    rows = await page.evaluate(
        """() => [...document.querySelector('.bar').children]
                  .filter(el => el.offsetParent !== null && !el.hidden)
                  .map(el => el.getBoundingClientRect())
                  .map(box => Math.round(box.top + box.height / 2))"""
    )
    assert rows
    assert max(rows) - min(rows) <= 6, rows
    height = await page.evaluate(
        "() => document.querySelector('.bar').getBoundingClientRect().height"
    )
    assert height <= 56, height


async def axe_clean(page: Page, where: str) -> None:
    """axe-core's rules on the page as it is: no serious or critical violation."""
    assert AXE.exists(), (
        f"{AXE} is missing: the stack's setup installs it (npm ci --prefix tools/axe)"
    )
    # Evaluated through the DevTools protocol, so the page's own CSP stays as it is.
    await page.evaluate(AXE.read_text(encoding="utf-8"))
    violations: list[dict[str, Any]] = await page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
              .map(v => ({id: v.id, impact: v.impact, help: v.help,
                          nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}))"""
    )
    bad = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert bad == [], (where, bad)


async def test_on_a_phone_two_screens_one_header_line_nothing_wider_and_axe_clean(
    stack: str, browser: Browser, env: Env
) -> None:
    await two_conversations(stack, env)
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    async with httpx.AsyncClient(base_url=stack, headers=student8) as api:
        made = await api.post(
            "/api/courses/42/posts",
            json={"title": "Lịch thi giữa kỳ", "body": "Thi vào thứ Ba, phòng A1."},
        )
        post_id = made.json()["data"]["id"]
        edited = await api.patch(
            f"/api/courses/42/posts/{post_id}",
            json={"body": "Thi vào thứ Tư tuần sau, phòng B2 — " + "rất dài " * 30},
        )
        assert edited.status_code == 200, edited.text

    async with watched_page(browser, PHONE, phone=True) as phone:
        page = phone.page
        await sign_in(phone, stack, 7)
        await expect(page.get_by_role("heading", name="Inbox — Zalo account 1")).to_be_visible()
        await expect(page).to_have_title(re.compile(r"^\(7\) Inbox — Zalo account 1 — agora$"))
        await expect(page.locator(".conversation")).to_have_count(2)
        await expect(page.locator(LIVE)).to_be_visible()
        await header_is_one_line(page)
        await no_horizontal_scroll(page, "inbox")
        # The list is the screen: no conversation pane beside or below it.
        await expect(page.locator(".thread")).to_be_hidden()
        await axe_clean(page, "inbox, phone")
        await phone.screenshot("fit-phone-inbox")

        first_unread = int(
            await page.locator(f'.conversation[data-key="{FIRST}"] .unread').inner_text() or 0
        )
        assert 0 < first_unread < 7, first_unread
        await page.locator(f'.conversation[data-key="{FIRST}"]').click()
        await expect(page.locator(".sidebar")).to_be_hidden()
        back = page.get_by_role("link", name="Back to the conversations")
        await expect(back).to_be_visible()
        await expect(back).to_be_in_viewport()
        await expect(page.locator(".thread-head h2")).to_have_text("Nguyễn Thị Hoa")
        # Opened on a visible screen is read: the title counts the others' unread.
        await expect(page).to_have_title(
            f"({7 - first_unread}) Nguyễn Thị Hoa — Inbox — Zalo account 1 — agora"
        )
        await expect(page.locator(".message").last).to_contain_text("Tin nhắn số 3")
        # A reply goes (queued: no listener here), and the screen still fits.
        await page.get_by_label("Reply to", exact=False).fill("Dạ shop kiểm tra rồi báo ạ 🙏")
        await page.get_by_role("button", name="Send", exact=True).click()
        await expect(page.locator(".message.out").last).to_contain_text("Dạ shop kiểm tra")
        await header_is_one_line(page)
        await no_horizontal_scroll(page, "conversation")
        await axe_clean(page, "conversation, phone")
        await phone.screenshot("fit-phone-conversation")

        await back.click()
        await expect(page.locator(".sidebar")).to_be_visible()
        await expect(page.locator(".thread")).to_be_hidden()
        # Opened on a visible screen is read: its count left the title.
        await expect(page).to_have_title(f"({7 - first_unread}) Inbox — Zalo account 1 — agora")
        await page.locator(f'.conversation[data-key="{SECOND}"]').click()
        await expect(page.locator(".message").last).to_contain_text("Tin nhắn số 5")
        await no_horizontal_scroll(page, "another conversation")

        await page.get_by_role("link", name="Forum").click()
        await expect(page.locator(".forum-body h1")).to_contain_text("Course forum")
        await page.locator('.my-courses a[data-course="42"]').click()
        await expect(page.locator(".post").first).to_be_visible()
        await expect(page).to_have_title("Cơ sở dữ liệu — Course forum — agora")
        await header_is_one_line(page)
        await no_horizontal_scroll(page, "forum")
        await axe_clean(page, "forum, phone")
        await phone.screenshot("fit-phone-forum")
        phone.assert_clean()

    # The author's History popover on a phone: it opens in the page's width, and closes on
    # Escape and on a tap outside.
    async with watched_page(browser, PHONE, phone=True) as phone:
        page = phone.page
        await sign_in(phone, stack, 8)
        await page.goto(f"{stack}/#/forum/42/posts/{post_id}")
        post = page.locator(".post.full")
        await expect(post.locator(".post-title")).to_have_text("Lịch thi giữa kỳ")
        await expect(page).to_have_title("Lịch thi giữa kỳ — Cơ sở dữ liệu — Course forum — agora")
        history = post.locator(".revisions")
        await history.locator("summary").click()
        await expect(history.locator(".revision")).to_have_count(1)
        await no_horizontal_scroll(page, "history popover")
        await phone.screenshot("fit-phone-history")
        await page.keyboard.press("Escape")
        await expect(history.locator(".revisions-panel")).to_be_hidden()
        await history.locator("summary").click()
        await expect(history.locator(".revision")).to_have_count(1)
        await page.locator(".post.full .post-title").click()
        await expect(history.locator(".revisions-panel")).to_be_hidden()
        phone.assert_clean()


async def test_at_a_desk_keys_titles_popovers_tabs_and_plain_words(
    stack: str, browser: Browser, env: Env
) -> None:
    await two_conversations(stack, env)
    async with watched_page(browser, DESKTOP) as watched:
        page = watched.page
        context = page.context
        await sign_in(watched, stack, 7)
        conversations = page.locator("a.conversation")
        await expect(conversations).to_have_count(2)
        await expect(page.locator(LIVE)).to_be_visible()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Inbox — Zalo account 1")
        await axe_clean(page, "inbox, desk")

        # The skip link is the first Tab stop and takes the keyboard to the content.
        # (from a fresh load: the focus starts at the top of the document)
        await page.reload()
        await expect(conversations).to_have_count(2)
        await page.keyboard.press("Tab")
        skip = page.get_by_role("link", name="Skip to main content")
        await expect(skip).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("main")).to_be_focused()

        # The list is one Tab stop; the arrow keys, Home and End move within it.
        stops = await conversations.evaluate_all("els => els.map(e => e.tabIndex)")
        assert sorted(stops) == [-1, 0], stops
        first, second = conversations.nth(0), conversations.nth(1)
        await first.focus()
        await page.keyboard.press("ArrowDown")
        await expect(second).to_be_focused()
        await expect(second).to_have_attribute("tabindex", "0")
        await expect(first).to_have_attribute("tabindex", "-1")
        await page.keyboard.press("ArrowDown")  # the last stays
        await expect(second).to_be_focused()
        await page.keyboard.press("Home")
        await expect(first).to_be_focused()
        await page.keyboard.press("End")
        await expect(second).to_be_focused()
        await page.keyboard.press("ArrowUp")
        await expect(first).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page).to_have_title(TITLE_WITH_A_COUNT)
        await expect(page.get_by_role("heading", level=2, name="Nguyễn Thị Hoa")).to_be_visible()
        await expect(page.locator(".message").last).to_contain_text("Tin nhắn số 3")
        await axe_clean(page, "conversation, desk")

        # Offline: an action says so in the user's words, never how to run the stack.
        await context.set_offline(True)
        await page.get_by_role("button", name="Mark read").click()
        notice = page.locator("#notice")
        await expect(notice).to_contain_text("You are offline")
        await expect(notice).not_to_contain_text("make up")
        await context.set_offline(False)

        # A second tab of the same browser is signed in already, for the token's life.
        other = await context.new_page()
        await other.goto(f"{stack}/")
        await expect(other.locator("#who")).to_contain_text("Nguyễn Thị Lan")
        await expect(other.get_by_role("heading", name="Inbox — Zalo account 1")).to_be_visible()

        # Switching to the forum: what was on screen goes at once, a loading line in its place.
        release = asyncio.Event()

        async def slow(route: Route) -> None:
            await release.wait()
            await route.continue_()

        await page.route(re.compile(r".*/api/courses\?.*"), slow)
        await page.get_by_role("link", name="Course forum").click()
        await expect(page.locator("main")).to_contain_text("Loading your courses…")
        await expect(page.locator(".inbox")).to_have_count(0)
        await expect(page).to_have_title("Course forum — agora")
        release.set()  # the route stays: the requests after this one pass straight through
        await page.locator('.my-courses a[data-course="42"]').click()
        await expect(page.locator(".post").first).to_be_visible()
        await expect(page.get_by_role("heading", level=1)).to_contain_text("Cơ sở dữ liệu")
        await expect(page).to_have_title("Cơ sở dữ liệu — Course forum — agora")
        await axe_clean(page, "forum, desk")

        # Who liked: you, after your like; not you, after your unlike (the popover open).
        like = page.locator('.post[data-id="1"] .like')
        likers = page.locator('.post[data-id="1"] .likers')
        await like.click()
        await expect(like).to_have_attribute("data-liked", "true")
        await expect(like).not_to_have_attribute("aria-busy", "true")
        await likers.locator("summary").click()
        await expect(likers.locator('li[data-user="7"]')).to_have_count(1)
        await expect(likers.locator('li[data-user="7"]')).to_contain_text("you")
        await like.click()  # outside the popover: it closes
        await expect(like).to_have_attribute("data-liked", "false")
        await expect(like).not_to_have_attribute("aria-busy", "true")
        await expect(likers.locator(".likers-panel")).to_be_hidden()
        await expect(likers.locator('li[data-user="7"]')).to_have_count(0)
        await likers.locator("summary").click()
        await expect(likers.locator(".likers-list")).to_contain_text("Nobody yet.")
        await expect(likers.locator('li[data-user="7"]')).to_have_count(0)
        # Escape closes it; so does a click outside.
        await expect(likers).to_have_attribute("open", "")
        await page.keyboard.press("Escape")
        await expect(likers.locator(".likers-panel")).to_be_hidden()
        await likers.locator("summary").click()
        await expect(likers.locator(".likers-panel")).to_be_visible()
        await page.get_by_role("heading", level=1).click()
        await expect(likers.locator(".likers-panel")).to_be_hidden()

        # A post's page names the post.
        await page.locator('.post[data-id="1"] .post-title a').click()
        await expect(page.locator(".post.full .post-title")).to_be_visible()
        title = await page.locator(".post.full .post-title").inner_text()
        await expect(page).to_have_title(f"{title} — Cơ sở dữ liệu — Course forum — agora")

        # Signing out in the second tab signs this one out too.
        await other.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        await expect(page).to_have_title("Sign in — agora")
        await other.close()
        watched.assert_clean()


async def test_axe_is_installed_by_the_setup_from_its_lockfile() -> None:
    """tools/axe pins axe-core; the stack's setup (deploy/local/stack/install.py) installs it."""
    assert AXE.exists(), "run the stack's setup: it runs npm ci --prefix tools/axe"
    lock = (ROOT / "tools" / "axe" / "package-lock.json").read_text(encoding="utf-8")
    assert '"node_modules/axe-core"' in lock
    install = (ROOT / "deploy" / "local" / "stack" / "install.py").read_text(encoding="utf-8")
    assert "tools/axe" in install
