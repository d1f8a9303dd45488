"""The web client live, in Chromium against every service as a process: two agents on one inbox
see a message the moment it is stored, one scrolled up keeps its place, the one reading at the
foot with its tab visible reads it as it arrives and the other shows it read; an agent offline
while messages arrive shows each once, in order, when back (by Last-Event-ID, even when cut
before its first event; by refetching in place after a reset of a feed that no longer keeps its
position); the forum follows new posts, comments, deletions and other users' likes. No page is
reloaded: each test checks its document is the one it started with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Request, expect

from tests.helpers import mint_token
from tests.stack import Env
from tests.web.support import (
    Watched,
    bearer,
    conversation,
    new_post,
    set_hidden,
    sign_in,
    signed_in,
    watched_page,
)
from tools.waiting import until

pytestmark = pytest.mark.asyncio

LONG = "live-long"  # more than a page: room to scroll up
SHORT = "live-short"  # the newest activity at first
OFFLINE = "live-offline"  # messages arrive while its agent is offline
RESET = "live-reset"  # more arrive than the feed keeps
LIVE = '#live[data-state="live"]'


def message(thread: str, msg_id: str, sent_at: datetime, text: str) -> dict[str, Any]:
    return {
        "msg_id": msg_id,
        "thread_id": thread,
        "direction": "in",
        "sender_id": "khach-2",
        "sender_name": "Trần Văn Nam",
        "content": text,
        "msg_type": "webchat",
        "sent_at": sent_at.isoformat(),
    }


async def ingest(api: httpx.AsyncClient, messages: list[dict[str, Any]]) -> None:
    reply = await api.post("/api/zalo-accounts/1/messages", json={"messages": messages})
    assert reply.json()["data"] == {"accepted": len(messages), "rejected": []}, reply.text


async def stored(api: httpx.AsyncClient, thread: str, count: int) -> None:
    async def done() -> bool:
        page = await api.get(
            "/api/zalo-accounts/1/messages", params={"conversation_key": thread, "limit": 100}
        )
        return page.status_code == 200 and len(page.json()["data"]) == count

    await until(f"the flusher to store {count} messages of {thread}", done)


async def open_conversation(page: Page, thread: str) -> None:
    await page.locator(f'.conversation[data-key="{thread}"]').click()
    await expect(page.locator("#timeline-start")).not_to_have_attribute("data-state", "loading")
    await expect(page.locator(LIVE)).to_be_visible()


async def same_document(page: Page) -> None:
    """Mark the document; `still_same_document` fails if the page was loaded again since."""
    await page.evaluate("window.sameDocument = true")


async def still_same_document(page: Page) -> None:
    assert await page.evaluate("window.sameDocument === true"), "the page was reloaded"


async def shown_ids(page: Page) -> list[str]:
    ids: list[str] = await page.locator(".message").evaluate_all(
        "els => els.map(e => e.dataset.msgId)"
    )
    return ids


@dataclass
class Asked:
    """What a page asked the gateway for: the Last-Event-ID of each inbox stream it opened (None:
    from now on), when it read a page of messages, and which conversations it marked read."""

    resumed_from: list[str | None] = field(default_factory=list)
    reads: list[float] = field(default_factory=list)
    marked_read: list[str] = field(default_factory=list)

    async def record(self, request: Request) -> None:
        if request.url.endswith("/api/zalo-accounts/1/events"):
            self.resumed_from.append(await request.header_value("last-event-id"))
        elif "/api/zalo-accounts/1/messages?" in request.url:
            self.reads.append(time.monotonic())
        elif request.method == "POST" and request.url.endswith("/read"):
            self.marked_read.append(request.url)


@asynccontextmanager
async def agent_on_three(
    stack: str, browser: Browser, env: Env, thread: str, hours: int
) -> AsyncIterator[tuple[datetime, httpx.AsyncClient, Watched, Asked]]:
    """User 7, an agent of account 1: three messages of `thread` from `hours` before now on,
    stored through the API as them; then their page signed in, its tab hidden, and open on those,
    what it asks for recorded from before it signs in. Hidden before it opens the conversation: a
    conversation opened in view is read (a read that may land at any time after), and these tests
    count what arrives. Yields that now, the API client, the page and what it asked."""
    now = datetime.now(UTC).replace(microsecond=0)
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        httpx.AsyncClient(base_url=stack, headers=bearer(token)) as api,
        watched_page(browser) as watched,
    ):
        await ingest(api, conversation(thread, 3, now - timedelta(hours=hours)))
        await stored(api, thread, 3)
        asked = Asked()
        watched.page.on("request", asked.record)
        await sign_in(watched, stack, 7)
        await set_hidden(watched.page, True)
        await open_conversation(watched.page, thread)
        yield now, api, watched, asked
        assert asked.marked_read == []  # hidden all along: nothing was read


@asynccontextmanager
async def beside_a_student(
    stack: str, browser: Browser, env: Env, at: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Page]]:
    """User 7's page signed in on `at`, and user 8 (a student of course 42) writing through the
    API beside it; when the block ends, the page is still the document it began with, and clean."""
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    async with (
        httpx.AsyncClient(base_url=stack, headers=student8) as api,
        signed_in(browser, stack, 7, at) as watched,
    ):
        yield api, watched.page
        await still_same_document(watched.page)
        watched.assert_clean()


async def test_two_agents_see_a_new_message_within_a_second_and_each_others_mark_read(
    stack: str, browser: Browser, env: Env
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    long = conversation(LONG, 40, now - timedelta(hours=2))
    short = conversation(SHORT, 3, now - timedelta(minutes=10))
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with (
        httpx.AsyncClient(base_url=stack, headers=bearer(token)) as api,
        watched_page(browser) as first,
        watched_page(browser) as second,
    ):
        await ingest(api, long + short)
        await stored(api, LONG, 40)
        await stored(api, SHORT, 3)
        # Two agents of account 1: user 7 (accounts 1, 2) and user 1 (every account), each in
        # a browser context of its own.
        for watched, user in ((first, 7), (second, 1)):
            await sign_in(watched, stack, user)
            page = watched.page
            keys = page.locator(".conversation")
            await expect(keys).to_have_count(2)
            assert await keys.evaluate_all("els => els.map(e => e.dataset.key)") == [SHORT, LONG]
            await open_conversation(page, LONG)
            await expect(page.locator(".message").last).to_contain_text("Tin nhắn số 39")
            await same_document(page)
        # The first reads at the bottom; the second has scrolled up to read older messages.
        reader = second.page.locator(".timeline")
        await reader.evaluate("el => { el.scrollTop = 300; }")
        await second.page.wait_for_timeout(200)  # a scroll event, and no older page is due
        place = await reader.evaluate("el => el.scrollTop")
        assert place == 300

        started = time.monotonic()
        await ingest(api, [message(LONG, "live-new-1", now, "Có ai ở đó không? 👋")])
        arrived = '.message[data-msg-id="live-new-1"]'
        await asyncio.gather(
            *(
                w.page.wait_for_selector(arrived, state="attached", timeout=1000)
                for w in (first, second)
            )
        )
        took = time.monotonic() - started
        assert took < 1.0, f"the message took {took:.2f} s to show"

        for watched in (first, second):
            page = watched.page
            await expect(page.locator(arrived)).to_have_count(1)
            assert (await shown_ids(page))[-1] == "live-new-1"
            # The conversation moved to the top.
            keys = page.locator(".conversation")
            await expect(keys.first).to_have_attribute("data-key", LONG)
        # At the bottom: followed. Scrolled up: not moved, told instead.
        await expect(first.page.locator(arrived)).to_be_in_viewport()
        await expect(first.page.locator(".new-messages")).to_be_hidden()
        assert await reader.evaluate("el => el.scrollTop") == place
        await expect(second.page.locator(arrived)).not_to_be_in_viewport()
        hint = second.page.locator(".new-messages")
        await expect(hint).to_have_text("↓ 1 new message")
        await first.screenshot("live-inbox-at-the-bottom")
        await second.screenshot("live-inbox-scrolled-up")
        await hint.click()
        await expect(second.page.locator(arrived)).to_be_in_viewport()
        await expect(hint).to_be_hidden()

        # The first reads at the foot of the conversation with its tab visible: what arrives
        # is read as it arrives (all of it, the read marker being the conversation's); the
        # second, which did nothing, shows it too (the conversation's event).
        for watched in (first, second):
            page = watched.page
            badge = page.locator(f'.conversation[data-key="{LONG}"] .unread')
            await expect(badge).to_have_attribute("data-count", "0")
            await expect(badge).to_be_hidden()
            await expect(page.locator(".thread-unread")).to_have_text("All read")
            await still_same_document(page)
            watched.assert_clean()


async def test_an_agent_offline_while_messages_arrive_shows_each_once_in_order_when_back(
    stack: str, browser: Browser, env: Env
) -> None:
    async with agent_on_three(stack, browser, env, OFFLINE, hours=1) as (now, api, watched, asked):
        page = watched.page
        await expect(page.locator(".message")).to_have_count(3)
        await same_document(page)
        context = page.context
        # Each new message a minute after the one before, all after the first three.
        minutes = iter(range(30, 0, -1))

        def later(name: str) -> dict[str, Any]:
            return message(
                OFFLINE, name, now - timedelta(minutes=next(minutes)), f"Lúc vắng: {name}"
            )

        async def away_while(names: list[str]) -> None:
            """Offline; `names` stored meanwhile (and not shown); back online."""
            await context.set_offline(True)
            status = page.locator("#live")
            await expect(status).to_have_attribute("data-state", "reconnecting")
            await expect(status).to_have_text("reconnecting…")
            before = await shown_ids(page)
            await ingest(api, [later(name) for name in names])
            await stored(api, OFFLINE, len(before) + len(names))
            await page.wait_for_timeout(500)
            assert await shown_ids(page) == before  # offline: nothing came in
            await watched.screenshot("live-inbox-reconnecting")
            await context.set_offline(False)
            await expect(page.locator(LIVE)).to_be_visible()

        # Cut before any event: the stream's opening told its start position (an id-only
        # event), so it resumes from there and the two come by the stream, not by a refetch.
        read_before = len(asked.reads)
        await away_while(["gap-1", "gap-2"])
        expected = [f"{OFFLINE}-{i}" for i in range(3)] + ["gap-1", "gap-2"]
        await expect(page.locator(".message")).to_have_count(len(expected))
        assert await shown_ids(page) == expected
        assert asked.resumed_from[-1] is not None
        assert len(asked.reads) == read_before

        # One live message gives it a position; then five arrive while it is away.
        await ingest(api, [later("here")])
        await expect(page.locator('.message[data-msg-id="here"]')).to_have_count(1)
        await expect(page.locator(".thread-unread")).to_have_text("5 unread")  # its state came
        reconnects = len(asked.resumed_from)
        five = [f"away-{i}" for i in range(5)]
        await away_while(five)
        expected += ["here", *five]
        await expect(page.locator(".message")).to_have_count(len(expected))
        assert await shown_ids(page) == expected  # each once, in order
        assert await page.locator(".timeline").get_attribute("data-loaded") == str(len(expected))
        # The reconnection resumed after the last event it had, not from now.
        assert len(asked.resumed_from) > reconnects
        assert asked.resumed_from[-1] is not None
        assert len(asked.reads) == read_before
        await expect(page.locator(".thread-unread")).to_have_text("10 unread")
        badge = page.locator(f'.conversation[data-key="{OFFLINE}"] .unread')
        await expect(badge).to_have_attribute("data-count", "10")
        await still_same_document(page)
        watched.assert_clean()


@pytest.mark.stack_env(LIVE_MAX_EVENTS_PER_FEED="100")
async def test_back_after_more_than_the_feed_keeps_the_page_refetches_in_place(
    stack: str, browser: Browser, env: Env
) -> None:
    async with agent_on_three(stack, browser, env, RESET, hours=3) as (now, api, watched, asked):
        page = watched.page
        await same_document(page)
        await ingest(api, [message(RESET, "here", now - timedelta(hours=2), "Còn đây")])
        await expect(page.locator('.message[data-msg-id="here"]')).to_have_count(1)

        # Away while 150 arrive (a laptop's lid shut: the tab hidden, the network gone): more
        # than the account's feed keeps (100 events), so the position it resumes from is gone
        # and the stream answers with a reset.
        await set_hidden(page, True)
        await page.context.set_offline(True)
        await expect(page.locator("#live")).to_have_attribute("data-state", "reconnecting")
        flood = [
            message(RESET, f"flood-{i:03d}", now - timedelta(minutes=150 - i), f"Tin {i}")
            for i in range(150)
        ]
        await ingest(api, flood)

        async def all_stored() -> bool:
            reply = await api.get(f"/api/zalo-accounts/1/conversations/{RESET}/unread")
            unread: int = reply.json()["data"]["unread"]
            return unread == 2 + 1 + 150  # every one incoming

        await until("the flusher to store the 150", all_stored)
        back = time.monotonic()
        await page.context.set_offline(False)
        await expect(page.locator(LIVE)).to_be_visible()

        # Refetched in place: more new messages than a page, so the timeline starts over from
        # the newest page (older ones load on scrolling up, as usual), each once, in order.
        newest = [m["msg_id"] for m in flood[-30:]]
        await expect(page.locator(".message").last).to_have_attribute("data-msg-id", newest[-1])
        await expect(page.locator(".message")).to_have_count(30)
        assert await shown_ids(page) == newest
        assert asked.resumed_from[-1] is not None  # it did resume from its position
        assert any(at > back for at in asked.reads)  # and read the timeline again
        # The lid still shut (hidden): nothing was read, every one counts.
        badge = page.locator(f'.conversation[data-key="{RESET}"] .unread')
        await expect(badge).to_have_attribute("data-count", str(2 + 1 + 150))
        await still_same_document(page)
        watched.assert_clean()


# --- course forum -------------------------------------------------------------------------------
# The course's events (post, comment, likes) are published by the forum writes and the likes
# flusher: these tests need that side running in the stack.


async def test_a_like_by_another_user_changes_the_count_on_an_open_post(
    stack: str, browser: Browser, env: Env
) -> None:
    async with beside_a_student(stack, browser, env, "/#/forum/42/posts/1") as (api, page):
        post_like = page.locator(".post.full .like")
        comment_like = page.locator('.comment.root[data-id="1"] > .comment-block .like')
        await expect(post_like).to_have_attribute("data-count", "0")
        await expect(comment_like).to_have_attribute("data-count", "0")
        await expect(page.locator(LIVE)).to_be_visible()
        await same_document(page)

        liked = await api.post("/api/courses/42/posts/1/like", json={"like": True})
        assert liked.status_code == 200, liked.text
        await expect(post_like).to_have_attribute("data-count", "1")
        await expect(post_like).to_have_attribute("data-liked", "false")  # user 8's, not ours
        liked = await api.post("/api/courses/42/comments/1/like", json={"like": True})
        assert liked.status_code == 200, liked.text
        await expect(comment_like).to_have_attribute("data-count", "1")
        unliked = await api.post("/api/courses/42/posts/1/like", json={"like": False})
        assert unliked.status_code == 200, unliked.text
        await expect(post_like).to_have_attribute("data-count", "0")


async def test_the_forum_shows_new_posts_and_comments_and_drops_deleted_ones(
    stack: str, browser: Browser, env: Env
) -> None:
    async with beside_a_student(stack, browser, env, "/#/forum/42") as (api, page):
        posts = page.locator(".post")
        await expect(posts).to_have_count(2)
        await expect(page.locator(LIVE)).to_be_visible()
        await same_document(page)

        written = await new_post(api, "Lịch thi cuối kỳ 📅", "Thi ngày nào ạ?")
        assert written.status_code == 201, written.text
        new_id = written.json()["data"]["id"]
        await expect(posts).to_have_count(3)
        await expect(posts.first).to_have_attribute("data-id", str(new_id))
        await expect(posts.first).to_contain_text("Lịch thi cuối kỳ 📅")
        await expect(posts.first).to_contain_text("by user 8")
        # A comment on post 1 moves its count in the feed.
        counted = page.locator('.post[data-id="1"] .comment-count')
        await expect(counted).to_have_text("💬 2 comments")
        comment = await api.post("/api/courses/42/posts/1/comments", json={"body": "Em cũng hỏi ạ"})
        assert comment.status_code == 201, comment.text
        await expect(counted).to_have_text("💬 3 comments")
        gone = await api.delete(f"/api/courses/42/posts/{new_id}")
        assert gone.status_code == 200, gone.text
        await expect(posts).to_have_count(2)
        await expect(page.locator(f'.post[data-id="{new_id}"]')).to_have_count(0)

        # The open post: a new comment appears under it, and goes when deleted.
        await page.locator('.post[data-id="1"] .post-title a').click()
        roots = page.locator(".comment.root")
        await expect(roots).to_have_count(3)
        another = await api.post(
            "/api/courses/42/posts/1/comments", json={"body": "Thầy ơi, có đề cương không ạ? 📚"}
        )
        another_id = another.json()["data"]["id"]
        await expect(roots).to_have_count(4)
        await expect(roots.last).to_have_attribute("data-id", str(another_id))
        await expect(roots.last).to_contain_text("Thầy ơi, có đề cương không ạ? 📚")
        await expect(page.locator(".post.full .comment-count")).to_have_text("💬 4 comments")
        deleted = await api.delete(f"/api/courses/42/comments/{another_id}")
        assert deleted.status_code == 200, deleted.text
        await expect(roots).to_have_count(3)
        await expect(page.locator(".post.full .comment-count")).to_have_text("💬 3 comments")
