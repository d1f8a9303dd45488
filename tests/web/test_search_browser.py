"""Search in the browser (Debian's Chromium driven by Playwright) against every service as a
process: a query typed without its marks finds the Vietnamese text, the matched words marked
(<mark>, the text never parsed as HTML); a message found opens its conversation scrolled to it,
highlighted, and scrolling down reads the newer pages to the newest; a comment found opens its
post at the comment. By keyboard, labelled, axe-clean, and at a phone's width."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.helpers import mint_token
from tests.stack import Env
from tests.web.support import bearer, conversation, sign_in, signed_in, watched_page
from tests.web.test_client_fit import PHONE, axe_clean, no_horizontal_scroll
from tools.waiting import until

pytestmark = pytest.mark.asyncio

THREAD = "web-search"
SIZE = 95  # three pages of the client's 30 and more
FOUND_AT = 20  # an old message: not on the newest page
FOUND_TEXT = "Shop ơi, xịt chống nắng còn hàng không? <img src=x> <b>gấp</b>"
# The index follows what the flusher stored a moment later.
INDEXED_WITHIN = 10.0


async def store_conversation(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    """THREAD's messages, one of them FOUND_TEXT, stored by the flusher."""
    now = datetime.now(UTC).replace(microsecond=0)
    messages = conversation(THREAD, SIZE, now - timedelta(hours=3))
    messages[FOUND_AT]["content"] = FOUND_TEXT
    reply = await api.post("/api/zalo-accounts/1/messages", json={"messages": messages})
    assert reply.json()["data"] == {"accepted": SIZE, "rejected": []}, reply.text

    async def stored() -> bool:
        page = await api.get(
            "/api/zalo-accounts/1/messages", params={"conversation_key": THREAD, "limit": 100}
        )
        return page.status_code == 200 and len(page.json()["data"]) == SIZE

    await until("the flusher to store the conversation", stored)
    return messages


async def indexed(api: httpx.AsyncClient, path: str, q: str) -> None:
    """Until the search route finds `q` (the flusher indexes what it stored a moment later)."""
    started = time.monotonic()

    async def found() -> bool:
        reply = await api.get(path, params={"q": q})
        assert reply.status_code == 200, reply.text
        return bool(reply.json()["hits"])

    await until(f"the index to find {q!r}", found, INDEXED_WITHIN)
    assert time.monotonic() - started <= INDEXED_WITHIN


async def read_down_to_the_newest(page: Page) -> None:
    """Scroll the open timeline to its foot until no newer page is left to read."""
    timeline = page.locator(".timeline")
    for _ in range(20):
        await timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        await page.wait_for_timeout(150)
        if await timeline.get_attribute("data-newer") == "false":
            return
    raise AssertionError("the newer pages never ended")


async def landed_on(page: Page, msg_id: str) -> None:
    """The timeline opened at message `msg_id`: it is shown, in view, highlighted and focused."""
    target = page.locator(f'.message[data-msg-id="{msg_id}"]')
    await expect(target).to_have_attribute("data-found", "true")
    await expect(target).to_be_in_viewport()
    await expect(target).to_be_focused()
    await expect(target).to_have_class(re.compile(r"\bfound\b"))
    # Highlighted briefly, not for good.
    await expect(target).not_to_have_class(re.compile(r"\bfound\b"), timeout=5_000)


async def test_a_message_opened_in_context_reads_newer_pages_to_the_newest(
    stack: str, browser: Browser, env: Env
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    async with httpx.AsyncClient(base_url=stack, headers=bearer(token)) as api:
        messages = await store_conversation(api)
    target = messages[FOUND_AT]["msg_id"]
    async with signed_in(browser, stack, 7, f"/#/inbox/1/{THREAD}/{target}") as watched:
        page = watched.page
        await landed_on(page, target)
        # The text as text: no element made of the message's markup.
        body = page.locator(f'.message[data-msg-id="{target}"] .message-body')
        await expect(body).to_have_text(FOUND_TEXT)
        assert await body.locator("img, b").count() == 0
        # Opened far from the newest: nothing is read by opening it there.
        await expect(page.locator(".timeline")).to_have_attribute("data-newer", "true")
        await read_down_to_the_newest(page)
        await expect(page.locator(".message").last).to_contain_text(f"Tin nhắn số {SIZE - 1}")
        # And up to the first: every message once, oldest first, no gap at either seam.
        timeline = page.locator(".timeline")
        for _ in range(20):
            await timeline.evaluate("el => { el.scrollTop = 0; }")
            await page.wait_for_timeout(150)
            if await page.locator("#timeline-start").get_attribute("data-state") == "start":
                break
        shown = await page.locator(".message").evaluate_all("els => els.map(e => e.dataset.msgId)")
        assert shown == [m["msg_id"] for m in messages]
        assert await timeline.get_attribute("data-duplicates") == "0"
        assert watched.errors == []


async def test_a_comment_opened_in_context_is_read_up_to_its_page(
    stack: str, browser: Browser, env: Env
) -> None:
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    async with httpx.AsyncClient(base_url=stack, headers=student8) as api:
        post = (
            await api.post(
                "/api/courses/42/posts", json={"title": "Hỏi về bài tập tuần 3", "body": "Câu 2?"}
            )
        ).json()["data"]
        comments = []
        for i in range(24):  # the target beyond the first pages of comments (10 a page)
            text = "Bạn xem lại định lý Pytago nhé" if i == 17 else f"Ý kiến số {i}"
            made = await api.post(
                f"/api/courses/42/posts/{post['id']}/comments", json={"body": text}
            )
            assert made.status_code == 201, made.text
            comments.append(made.json()["data"])
    target = comments[17]["id"]
    at = f"/#/forum/42/posts/{post['id']}/comments/{target}"
    async with signed_in(browser, stack, 7, at) as watched:
        page = watched.page
        comment = page.locator(f'.comment[data-id="{target}"]')
        await expect(comment).to_have_attribute("data-found", "true")
        await expect(comment).to_be_in_viewport()
        await expect(comment).to_be_focused()
        await expect(comment).to_contain_text("định lý Pytago")
        assert watched.errors == []


# With the index behind the search routes (the search service, the flusher's indexer).


async def test_the_inbox_finds_a_message_typed_without_marks_and_opens_it_there(
    stack: str, browser: Browser, env: Env
) -> None:
    token = mint_token(env.jwt_secret, sub=7, accounts=[1, 2])
    async with httpx.AsyncClient(base_url=stack, headers=bearer(token)) as api:
        messages = await store_conversation(api)
        await indexed(api, "/api/zalo-accounts/1/search", "xit chong nang")
    target = messages[FOUND_AT]["msg_id"]
    async with signed_in(browser, stack, 7) as watched:
        page = watched.page
        await expect(page.get_by_role("heading", name="Inbox — Zalo account 1")).to_be_visible()
        box = page.get_by_role("searchbox", name="Search messages")
        await box.fill("xit chong nang")
        await box.press("Enter")
        results = page.get_by_role("list", name="Results of search messages")
        hit = results.locator(".search-hit")
        await expect(hit).to_have_count(1)
        marks = await hit.locator("mark").all_inner_texts()
        assert marks == ["xịt", "chống", "nắng"]
        # The snippet is text: the message's markup shows as written, and makes no element.
        await expect(hit).to_contain_text("<img src=x>")
        assert await results.locator("img, b").count() == 0
        await expect(
            page.get_by_role("status").filter(has_text="for “xit chong nang”")
        ).to_be_visible()
        await axe_clean(page, "inbox search results, desk")
        await watched.screenshot("search-inbox-results")

        # By keyboard: Tab to the result, Enter opens it.
        await hit.focus()
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(re.compile(rf"#/inbox/1/{THREAD}/{target}$"))
        await landed_on(page, target)
        await watched.screenshot("search-inbox-opened")
        await read_down_to_the_newest(page)
        await expect(page.locator(".message").last).to_contain_text(f"Tin nhắn số {SIZE - 1}")

        # This conversation only: every hit is in it.
        await page.get_by_label("This conversation only").check()
        await box.fill("xin chao")
        await box.press("Enter")
        await expect(hit.first).to_be_visible()
        hrefs = await hit.evaluate_all("els => els.map(e => e.getAttribute('href'))")
        assert hrefs
        assert all(f"/{THREAD}/" in href for href in hrefs), hrefs
        # More results on the next cursor: 20 a page, the conversation has more.
        more = page.get_by_role("button", name="More results")
        await expect(more).to_be_visible()
        await more.click()
        await expect(hit).to_have_count(40)
        shown = await hit.evaluate_all("els => els.map(e => e.getAttribute('href'))")
        assert len(set(shown)) == 40
        assert watched.errors == []


async def test_a_bad_query_is_said_in_plain_words(stack: str, browser: Browser) -> None:
    async with signed_in(browser, stack, 7) as watched:
        page = watched.page
        box = page.get_by_role("searchbox", name="Search messages")
        await box.fill("?!")
        await box.press("Enter")
        await expect(page.locator(".search-status")).to_contain_text(
            "Please check what you entered"
        )


async def test_the_forum_finds_a_comment_and_opens_its_post_at_it_on_a_phone(
    stack: str, browser: Browser, env: Env
) -> None:
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    async with httpx.AsyncClient(base_url=stack, headers=student8) as api:
        post = (
            await api.post(
                "/api/courses/42/posts",
                json={"title": "Hỏi về bài tập tuần 3", "body": "Câu 2 khó quá"},
            )
        ).json()["data"]
        for i in range(15):
            text = "Bạn xem lại định lý Pytago nhé" if i == 12 else f"Ý kiến số {i}"
            made = await api.post(
                f"/api/courses/42/posts/{post['id']}/comments", json={"body": text}
            )
            assert made.status_code == 201, made.text
            if i == 12:
                target = made.json()["data"]["id"]
        await indexed(api, "/api/courses/42/search", "dinh ly pytago")

    async with watched_page(browser, PHONE, phone=True) as watched:
        page = watched.page
        await sign_in(watched, stack, 7)
        await page.goto(f"{stack}/#/forum/42")
        box = page.get_by_role("searchbox", name="Search this course")
        await box.fill("dinh ly pytago")
        await box.press("Enter")
        hit = page.locator(".search-hit")
        await expect(hit).to_have_count(1)
        await expect(hit).to_contain_text("Comment on “Hỏi về bài tập tuần 3”")
        assert await hit.locator("mark").all_inner_texts() == ["định", "lý", "Pytago"]
        await no_horizontal_scroll(page, "forum search, phone")
        await axe_clean(page, "forum search results, phone")
        await watched.screenshot("search-forum-phone")

        await hit.focus()
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(
            re.compile(rf"#/forum/42/posts/{post['id']}/comments/{target}$")
        )
        comment = page.locator(f'.comment[data-id="{target}"]')
        await expect(comment).to_have_attribute("data-found", "true")
        await expect(comment).to_be_in_viewport()
        await no_horizontal_scroll(page, "post opened at a comment, phone")

        # The post's own hit opens the post.
        await page.goto(f"{stack}/#/forum/42")
        await box.fill("bai tap tuan 3")
        await box.press("Enter")
        post_hit = page.locator(".search-hit").filter(has_text="Hỏi về bài tập tuần 3").first
        await expect(post_hit).to_be_visible()
        await post_hit.click()
        await expect(page).to_have_url(re.compile(rf"#/forum/42/posts/{post['id']}$"))
        assert watched.errors == []
