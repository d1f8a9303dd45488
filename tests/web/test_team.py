"""The inbox as a team's, in Chromium against every service as a process: two agents of Zalo
account 1 (users 7 and 8) in two browser contexts — one assigns a conversation to the other,
whose "Mine" list shows it live; "… is typing…" shows in the first within a second of the other
typing and goes when they stop; resolved by one, reopened for both by a new customer message.
Canned replies come with a leading /. Reading and noticing: the open conversation, visible, is
read as messages arrive (its badge never rises), not while the tab is hidden; the tab's title
counts the unread; a new message for me notifies once while the tab is hidden, only once
notifications are turned on. People are named everywhere (the sign-in, the timeline — a live
event's missing name from what the page read — the forum, who liked). A teacher's removal stays
in the thread as a placeholder with its reason, and its confirmation counts the replies that go
with it."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from services.runtime.mysql import MysqlDatabase
from tests.helpers import mint_token
from tests.stack import Env
from tests.web.support import (
    CAPTURE_NOTIFICATIONS,
    bearer,
    conversation,
    new_post,
    set_hidden,
    sign_in,
    signed_in,
    watched_page,
)
from tests.web.test_live import ingest, message, open_conversation, stored
from tools.people_data import DEMO_PEOPLE
from tools.waiting import until

pytestmark = pytest.mark.asyncio

TEAM, OTHER = "team-thread", "team-other"
SEEN, NOTE = "seen-thread", "note-thread"
LAN, NAM, BAO = DEMO_PEOPLE[7], DEMO_PEOPLE[8], DEMO_PEOPLE[1]


async def roster(admin_db: MysqlDatabase) -> None:
    """Account 1's team as the demo data has it: user 1 its owner, users 7 and 8 its agents."""
    async with admin_db.connection() as conn:
        await conn.executemany(
            "INSERT INTO zalo_account_agents (zalo_account_id, user_id, role) VALUES (%s, %s, %s)"
            " ON DUPLICATE KEY UPDATE role = VALUES(role)",
            [(1, 1, "owner"), (1, 7, "agent"), (1, 8, "agent")],
        )


async def two_threads(api: httpx.AsyncClient, first: str, second: str) -> datetime:
    """Three messages in each of two conversations of account 1 (`first` the newest), stored."""
    now = datetime.now(UTC).replace(microsecond=0)
    await ingest(
        api,
        conversation(second, 3, now - timedelta(hours=2))
        + conversation(first, 3, now - timedelta(minutes=30)),
    )
    await stored(api, second, 3)
    await stored(api, first, 3)
    return now


async def badge_watch(page: Page, thread: str) -> None:
    """Record every count the badge of `thread` and the open conversation's line show from now
    on (window.badgeCounts), however briefly."""
    await page.evaluate(
        """(thread) => {
            window.badgeCounts = [];
            const badge = document.querySelector(`.conversation[data-key="${thread}"] .unread`);
            const line = document.querySelector('.thread-unread');
            const note = () => window.badgeCounts.push(
                Number(badge.dataset.count || 0), Number(line.dataset.count || 0));
            for (const el of [badge, line]) {
                new MutationObserver(note).observe(el, {attributes: true, childList: true});
            }
        }""",
        thread,
    )


async def unread_on_server(api: httpx.AsyncClient, thread: str) -> int:
    reply = await api.get(f"/api/zalo-accounts/1/conversations/{thread}/unread")
    count: int = reply.json()["data"]["unread"]
    return count


async def notifications(page: Page) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = await page.evaluate("window.notifications")
    return shown


# Names and the development sign-in (existing routes only).


async def test_the_sign_in_lists_people_by_name_and_the_inbox_and_forum_name_them(
    stack: str, browser: Browser, env: Env
) -> None:
    lan = bearer(mint_token(env.jwt_secret, sub=7, accounts=[1]))
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    async with httpx.AsyncClient(base_url=stack, headers=lan) as api:
        await two_threads(api, TEAM, OTHER)
        # A reply of Lan's, read by the teacher's page from the timeline (agent_name).
        sent = await api.post(
            f"/api/zalo-accounts/1/conversations/{TEAM}/messages",
            json={"content": "Dạ em chào anh/chị ạ"},
            headers={"Idempotency-Key": "names-first-reply"},
        )
        assert sent.status_code == 202, sent.text
        made = await new_post(api, "Hỏi về đồ án", "Nhóm mấy người ạ?", student8)
        post_id = made.json()["data"]["id"]
        liked = await api.post(f"/api/courses/42/posts/{post_id}/like", json={"like": True})
        assert liked.status_code < 300, liked.text

        async def like_stored() -> bool:
            likers = await api.get(f"/api/courses/42/posts/{post_id}/likes")
            return [x["user_id"] for x in likers.json()["data"]] == [7]

        await until("the like to be stored", like_stored)

    async with watched_page(browser) as watched, watched_page(browser) as lan_page:
        page = watched.page
        await page.goto(f"{stack}/")
        people = page.locator(".demo-user")
        await expect(people).to_have_count(4)
        for user, role in ((7, "Agent of Zalo accounts 1 and 2"), (1, "Teacher of courses 42")):
            await expect(page.locator(f'.demo-user[data-sub="{user}"]')).to_contain_text(
                DEMO_PEOPLE[user]
            )
            await expect(page.locator(f'.demo-user[data-sub="{user}"]')).to_contain_text(role)
        # Not a number anywhere on a person's button.
        assert "User " not in " ".join(await people.all_inner_texts())
        await watched.screenshot("team-sign-in")
        await page.locator('.demo-user[data-sub="1"]').click()
        await expect(page.locator("#who")).to_contain_text(BAO)

        await open_conversation(page, TEAM)
        reply = page.locator(".message.out").last
        await expect(reply.locator(".sender")).to_have_text(LAN)
        await expect(reply.locator(".avatar")).to_have_text("NL")
        # Lan replies from her page: the teacher's page names her reply's live event (which
        # carries no name) from what it read.
        await sign_in(lan_page, stack, 7)
        await open_conversation(lan_page.page, TEAM)
        await lan_page.page.get_by_label("Reply to", exact=False).fill("Shop gửi lại ảnh nhé")
        await lan_page.page.get_by_role("button", name="Send", exact=True).click()
        live = page.locator(".message.out", has_text="Shop gửi lại ảnh nhé")
        await expect(live).to_have_count(1)
        await expect(live.locator(".sender")).to_have_text(LAN)
        assert "user 7" not in (await page.locator(".messages").inner_text())

        # The forum: the post's author, and who liked it, by name.
        await page.goto(f"{stack}/#/forum/42")
        post = page.locator(f'.post[data-id="{post_id}"]')
        await expect(post.locator(".meta")).to_contain_text(f"by {NAM}")
        await post.locator("details.likers summary").click()
        await expect(post.locator('.likers-list li[data-user="7"]')).to_contain_text(LAN)
        watched.assert_clean()
        lan_page.assert_clean()


# Reading and noticing (existing routes only).


async def test_a_visible_conversation_is_read_as_messages_arrive_and_a_hidden_tab_notifies_once(
    stack: str, browser: Browser, env: Env
) -> None:
    token = bearer(mint_token(env.jwt_secret, sub=7, accounts=[1]))
    async with (
        httpx.AsyncClient(base_url=stack, headers=token) as api,
        watched_page(browser) as watched,
    ):
        await two_threads(api, SEEN, NOTE)
        page = watched.page
        await page.context.grant_permissions(["notifications"], origin=stack)
        await page.context.add_init_script(CAPTURE_NOTIFICATIONS)
        await sign_in(watched, stack, 7)
        # Two incoming of three in each: the title counts the four unread.
        await expect(page).to_have_title("(4) Inbox — Zalo account 1 — agora")
        await open_conversation(page, SEEN)
        await page.get_by_role("button", name="Mark read").click()
        await expect(page.locator(".thread-unread")).to_have_text("All read")
        await expect(page).to_have_title("(2) Nguyễn Thị Hoa — Inbox — Zalo account 1 — agora")

        # Visible, at its foot: each new message is read as it arrives; the badge never rises.
        await badge_watch(page, SEEN)
        # Each sent after the read marker (a message sent before it counts as read already).
        for i in range(3):
            sent_at = datetime.now(UTC)
            await ingest(api, [message(SEEN, f"seen-{i}", sent_at, f"Còn hàng không {i}?")])
            await expect(page.locator(f'.message[data-msg-id="seen-{i}"]')).to_have_count(1)

        async def all_read() -> bool:
            return await unread_on_server(api, SEEN) == 0

        await until("the arrivals to be read on the server", all_read)
        await page.wait_for_timeout(500)  # any late conversation event
        counts = await page.evaluate("window.badgeCounts")
        assert counts, "no conversation event reached the open conversation"
        assert max(counts) == 0, counts
        await expect(page).to_have_title("(2) Trần Văn Nam — Inbox — Zalo account 1 — agora")

        # Notifications are off until turned on: hidden, a new message notifies nobody.
        alerts = page.locator("details.alert-settings")
        await alerts.locator("summary").click()
        toggle = page.get_by_label("Notify me while this tab is hidden")
        await expect(toggle).not_to_be_checked()
        await expect(page.get_by_label("Play a sound")).not_to_be_checked()
        await set_hidden(page, True)
        await ingest(api, [message(NOTE, "note-0", datetime.now(UTC), "Alo shop")])
        note_badge = page.locator(f'.conversation[data-key="{NOTE}"] .unread')
        await expect(note_badge).to_have_attribute("data-count", "3")
        assert await notifications(page) == []

        await set_hidden(page, False)
        await toggle.check()
        await expect(toggle).to_be_checked()
        assert await page.evaluate("localStorage.getItem('agora.alerts.notify')") == "1"
        await set_hidden(page, True)
        await ingest(api, [message(NOTE, "note-1", datetime.now(UTC), "Shop ơi")])

        async def notified() -> bool:
            return len(await notifications(page)) >= 1

        await until("a notification", notified, 10)
        await page.wait_for_timeout(1500)  # no second one for the same message
        shown = await notifications(page)
        assert len(shown) == 1, shown
        assert shown[0]["body"] == "Shop ơi"
        # Named as the list names the conversation: its contact.
        assert shown[0]["title"] == "Trần Văn Nam — Zalo account 1", shown

        # Hidden, the open conversation is not read: its badge rises; shown again, it is read.
        await ingest(api, [message(SEEN, "seen-hidden", datetime.now(UTC), "Hello?")])
        seen_badge = page.locator(f'.conversation[data-key="{SEEN}"] .unread')
        await expect(seen_badge).to_have_attribute("data-count", "1")
        await expect(page.locator(".thread-unread")).to_have_text("1 unread")
        await expect(page).to_have_title("(5) Trần Văn Nam — Inbox — Zalo account 1 — agora")
        await set_hidden(page, False)
        await expect(seen_badge).to_have_attribute("data-count", "0")
        await expect(page.locator(".thread-unread")).to_have_text("All read")
        # Visible: no notification, whatever arrives.
        await ingest(api, [message(NOTE, "note-2", datetime.now(UTC), "Alo?")])
        await expect(note_badge).to_have_attribute("data-count", "5")
        assert len(await notifications(page)) == 2  # the hidden SEEN message's, and NOTE's
        await watched.screenshot("team-notifications")
        watched.assert_clean()


# The team's routes (assignment, status, presence, canned replies, agents).


async def test_two_agents_assign_see_typing_resolve_and_a_new_message_reopens(
    stack: str, browser: Browser, env: Env, admin_db: MysqlDatabase
) -> None:
    await roster(admin_db)
    token = bearer(mint_token(env.jwt_secret, sub=7, accounts=[1]))
    async with (
        httpx.AsyncClient(base_url=stack, headers=token) as api,
        watched_page(browser) as lan,
        watched_page(browser) as nam,
    ):
        now = await two_threads(api, TEAM, OTHER)
        await sign_in(lan, stack, 7)
        await sign_in(nam, stack, 8)
        a, b = lan.page, nam.page
        # Nam's "Mine": nothing assigned to him yet.
        await b.get_by_role("button", name="Mine").click()
        await expect(b.get_by_role("button", name="Mine")).to_have_attribute("aria-pressed", "true")
        await expect(b.locator(".conversation")).to_have_count(0)
        await expect(b.locator(".empty-list")).to_contain_text("assigned to you")

        # Lan assigns TEAM to Nam: his "Mine" shows it, live.
        await open_conversation(a, TEAM)
        picker = a.get_by_label("Assignee")
        await expect(picker).to_be_enabled()
        # Owners first, then by name (the roster's order); herself marked.
        await expect(picker.locator("option")).to_have_text(["Unassigned", BAO, NAM, f"{LAN} (me)"])
        await picker.select_option(label=NAM)
        row = b.locator(f'.conversation[data-key="{TEAM}"]')
        await expect(row).to_have_count(1)
        await expect(row).to_have_attribute("data-assignee", "8")
        await expect(row.locator(".avatar")).to_have_text("LN")
        await expect(a.locator(f'.conversation[data-key="{TEAM}"] .avatar')).to_have_text("LN")

        # Nam opens it: Lan sees him viewing; he types: "typing" within a second; he stops:
        # it goes within seconds.
        await open_conversation(b, TEAM)
        presence = a.locator(".presence-line")
        await expect(presence).to_have_text("Nam is viewing")
        await b.get_by_label("Reply to", exact=False).press_sequentially("Dạ em ")
        started = time.monotonic()
        await expect(presence).to_contain_text("Nam is typing…", timeout=1000)
        assert time.monotonic() - started < 1.0
        await lan.screenshot("team-inbox")
        stopped = time.monotonic()
        await expect(presence).not_to_contain_text("typing", timeout=8000)
        assert time.monotonic() - stopped < 8.0
        await expect(presence).to_have_text("Nam is viewing")
        # Lan's own presence is never shown to herself, only to Nam.
        await expect(b.locator(".presence-line")).to_have_text("Lan is viewing")

        # Nam resolves it: both see it resolved.
        await b.get_by_role("button", name="Resolve").click()
        for page in (a, b):
            await expect(page.locator(".thread-team .status-chip")).to_have_attribute(
                "data-status", "resolved"
            )
            await expect(page.get_by_role("button", name="Reopen")).to_be_visible()
        await expect(row).to_have_attribute("data-status", "resolved")
        # The status filter: Lan's "Open" list no longer has it.
        await a.get_by_label("Status").select_option("open")
        await expect(a.locator(f'.conversation[data-key="{TEAM}"]')).to_have_count(0)
        await expect(a.locator(f'.conversation[data-key="{OTHER}"]')).to_have_count(1)

        # A new customer message reopens it, for both.
        await ingest(api, [message(TEAM, "team-reopen", now, "Cho em hỏi thêm ạ")])
        for page in (a, b):
            await expect(page.locator(".thread-team .status-chip")).to_have_attribute(
                "data-status", "open"
            )
        await expect(row).to_have_attribute("data-status", "open")
        await expect(a.locator(f'.conversation[data-key="{TEAM}"]')).to_have_count(1)

        # Nam leaves the conversation: Lan's line empties at once (idle), not after its TTL.
        await b.goto(f"{stack}/#/inbox/1")
        await expect(presence).to_have_text("", timeout=5000)
        lan.assert_clean()
        nam.assert_clean()


async def test_a_slash_lists_the_canned_replies_and_enter_puts_one_in_filled(
    stack: str, browser: Browser, env: Env, admin_db: MysqlDatabase
) -> None:
    await roster(admin_db)
    owner = bearer(mint_token(env.jwt_secret, sub=1, accounts=[1, 2, 3]))
    async with httpx.AsyncClient(base_url=stack, headers=owner) as api:
        await two_threads(api, TEAM, OTHER)
        for shortcut, body in (
            ("chao", "Chào {{contact_name}}, em là {{agent_name}} ạ."),
            ("cam-on", "Cảm ơn {{contact_name}} đã nhắn tin!"),
        ):
            made = await api.post(
                "/api/zalo-accounts/1/canned-replies", json={"shortcut": shortcut, "body": body}
            )
            assert made.status_code == 201, made.text

    async with signed_in(browser, stack, 7) as watched:
        page = watched.page
        await open_conversation(page, TEAM)
        box = page.get_by_label("Reply to", exact=False)
        await box.press_sequentially("/")
        menu = page.get_by_role("listbox", name="Canned replies")
        await expect(menu.get_by_role("option")).to_have_count(2)
        await box.press_sequentially("ca")
        await expect(menu.get_by_role("option")).to_have_count(1)
        await expect(menu.get_by_role("option")).to_contain_text("/cam-on")
        await box.press("Backspace")
        await box.press("Backspace")
        await expect(menu.get_by_role("option")).to_have_count(2)
        await box.press("ArrowDown")
        await expect(menu.locator('[aria-selected="true"]')).to_contain_text("/chao")
        await watched.screenshot("team-canned-replies")
        await box.press("Enter")
        await expect(menu).to_be_hidden()
        await expect(box).to_have_value(f"Chào Nguyễn Thị Hoa, em là {LAN} ạ.")
        await expect(page.locator(".message.pending")).to_have_count(0)  # not sent by Enter
        await page.keyboard.press("Enter")
        await expect(page.locator(".message.out").last).to_contain_text("em là")
        watched.assert_clean()

    # The owner's screens: the agents with their roles, and a new canned reply.
    async with signed_in(browser, stack, 1, "/#/inbox/1") as watched:
        page = watched.page
        await page.get_by_role("link", name="Team").click()
        agents = page.locator(".agent")
        await expect(agents).to_have_count(3)
        await expect(agents.first).to_contain_text(BAO)
        await expect(page.locator('.agent[data-user="8"] .agent-role')).to_have_value("agent")
        await page.get_by_role("link", name="Canned replies").click()
        await page.locator(".canned-form .canned-shortcut").last.fill("hen")
        await page.locator(".canned-form .canned-body").last.fill("Hẹn gặp {{contact_name}}!")
        await page.get_by_role("button", name="Add").click()
        await expect(page.locator(".canned", has_text="/hen")).to_contain_text(BAO)
        await page.get_by_role("link", name="Audit").click()
        await expect(page.locator(".audit-list li").first).to_have_attribute(
            "data-action", "canned_reply.created"
        )
        await expect(page.locator(".audit-list li").first).to_contain_text(BAO)
        watched.assert_clean()


# The moderation placeholder (the forum's removed comments).


async def test_a_removed_comment_stays_as_its_placeholder_with_the_reason(
    stack: str, browser: Browser, env: Env
) -> None:
    student8 = bearer(mint_token(env.jwt_secret, sub=8, accounts=[]))
    student9 = bearer(mint_token(env.jwt_secret, sub=9, accounts=[]))
    async with httpx.AsyncClient(base_url=stack) as api:
        made = await new_post(api, "Hỏi về bài tập 5", "Câu 2 ạ?", student8)
        post_id = made.json()["data"]["id"]
        spam = await api.post(
            f"/api/courses/42/posts/{post_id}/comments",
            json={"body": "Bán tài khoản giá rẻ 💸"},
            headers=student9,
        )
        spam_id = spam.json()["data"]["id"]
        for text in ("Báo cáo rồi", "Đừng mua nhé"):
            answered = await api.post(
                f"/api/courses/42/posts/{post_id}/comments",
                json={"body": text, "parent_id": spam_id},
                headers=student8,
            )
            assert answered.status_code == 201, answered.text

    async with signed_in(browser, stack, 1, f"/#/forum/42/posts/{post_id}") as watched:
        page = watched.page
        spam_el = page.locator(f'.comment[data-id="{spam_id}"]')
        await expect(spam_el.locator(".comment-body")).to_have_text("Bán tài khoản giá rẻ 💸")
        await spam_el.locator(".moderate summary").first.click()
        # The confirmation says what goes with it.
        remove = spam_el.locator(".moderate-remove").first
        await expect(remove).to_have_text("Remove this comment and 2 replies")
        await expect(spam_el.locator(".moderate-note").first).to_contain_text("2 replies")
        await spam_el.locator(".moderate-reason").first.fill("Quảng cáo")
        await remove.click()
        await expect(spam_el.locator(".comment-removed")).to_have_text(
            "Removed by a teacher: Quảng cáo"
        )
        await expect(spam_el.locator(".reply")).to_have_count(0)
        await expect(page.locator(".post.full .comment-count")).to_contain_text("0 comments")
        watched.assert_clean()

    # Read again by a student: the placeholder is where the comment was, its replies gone.
    async with signed_in(browser, stack, 8, f"/#/forum/42/posts/{post_id}") as watched:
        page = watched.page
        spam_el = page.locator(f'.comment[data-id="{spam_id}"]')
        await expect(spam_el).to_have_attribute("data-removed", "true")
        await expect(spam_el.locator(".comment-removed")).to_have_text(
            "Removed by a teacher: Quảng cáo"
        )
        await expect(spam_el.locator(".comment-removed")).to_have_attribute(
            "title", re.compile(f"^Removed by {BAO}")
        )
        await expect(page.locator(".comment-body", has_text="Báo cáo rồi")).to_have_count(0)
        await watched.screenshot("forum-removed-placeholder")
        watched.assert_clean()
