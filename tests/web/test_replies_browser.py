"""Agents reply in Chromium (docs/outbound.md), against every service as a process behind the real
gateway and a listener: an agent replies quoting a message and sees it pending, then sent ✓,
delivered ✓✓ and Seen without reloading, while a second agent's window shows the reply and its
states live; the states only ever move forward; a reload shows it once. A reply sent while
offline goes once when the network is back, and one whose answer was lost is sent again with the
same Idempotency-Key and stored once. A failure shows its reason and Retry sends it; on a phone
(390×844) the composer is in view and not covered.

The listener is the stand-in (tools/listener_standin, run by `listener_standin` below) for the
loop; where the test needs an exact outcome (a failure, then a
success) it plays the listener itself through the ListenerService contract (ScriptedListener).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from agora.messaging.v1 import (
    ingest_service_pb2,
    ingest_service_pb2_grpc,
    listener_service_pb2,
    listener_service_pb2_grpc,
    message_pb2,
)
from playwright.async_api import Browser, Locator, Page, Route, ViewportSize, expect

from tests.chaos.harness.faults.grants import ensure_grants
from tests.chaos.harness.local_stack import ROOT
from tests.chaos.harness.stack import ChaosStack
from tests.helpers import as_listener, mint_token
from tests.stack import Env
from tests.web.support import Watched, bearer, sign_in, watched_page
from tests.web.test_live import ingest, message, open_conversation, stored
from tools import callers
from tools.waiting import until

pytestmark = pytest.mark.asyncio

THREAD = "reply-loop"
PHONE = ViewportSize(width=390, height=844)
# Ranks of the states a reply shows (data-state): sending/waiting before the 202, then the
# server's. failed ranks with queued (a retry queues it again).
RANK = {"waiting": 0, "sending": 0, "queued": 1, "failed": 1, "sent": 2, "delivered": 3, "seen": 4}


# --- The stack and the listener -----------------------------------------------------------------


@dataclass
class Loop:
    """The gateway's URL and the stack behind it (ingest's port for a listener)."""

    url: str
    stack: ChaosStack

    @property
    def ingest_port(self) -> int:
        return self.stack.services["ingest"].port


@pytest_asyncio.fixture
async def loop(clean: None) -> AsyncIterator[Loop]:
    """tests/web/conftest.py's `stack` (every service a process, the development gateway on
    loopback), yielding the stack too: a listener needs ingest's address."""
    await ensure_grants()
    running = ChaosStack(full=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JWT_DEV_MODE", "true")
        env.setenv("GATEWAY_HOST", "127.0.0.1")
        try:
            await running.start()
        except BaseException:
            await running.stop()
            raise
    try:
        yield Loop(f"http://127.0.0.1:{running.services['gateway'].port}", running)
    finally:
        await running.stop()


# The listener stand-in (tools/listener_standin) as these tests run it, set by its
# LISTENER_STANDIN_* variables (tools/listener_standin/config.py). What these tests assume of it:
# - it takes the orders of the accounts it is given (ListenerService.Listen at ingest's address,
#   the listener's certificate from var/tls), "sends" each: ReportOutcome sent and the echo
#   through IngestMessages (direction out, the order's cli_msg_id), then a `delivered` and later
#   a `seen` receipt through IngestReceipts;
# - the delays leave each state on screen for a moment (the echo 0.6 s after the send,
#   delivered at 1.6 s, seen at 2.8 s);
# - it fails nothing unless told to (these tests never tell it).
STANDIN_MODULE = "tools.listener_standin"


@asynccontextmanager
async def listener_standin(loop: Loop, accounts: list[int]) -> AsyncIterator[None]:
    """The stand-in, listening for `accounts`, until the block ends."""
    log = (loop.stack.log_dir / "listener-standin.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        os.environ.get("PYTHON", str(ROOT / ".venv/bin/python")),
        "-m",
        STANDIN_MODULE,
        cwd=ROOT,
        env={
            **os.environ,
            "LISTENER_STANDIN_TARGET": f"127.0.0.1:{loop.ingest_port}",
            "LISTENER_STANDIN_ACCOUNTS": ",".join(str(a) for a in accounts),
            "LISTENER_STANDIN_TLS_DIR": str(callers.tls_dir()),
            # This stack's own sent log: nothing of another run is forwarded again.
            "LISTENER_STANDIN_LOG": str(loop.stack.log_dir / "listener-standin-sent.jsonl"),
            "LISTENER_STANDIN_CATCH_UP_SECONDS": "0",
            "LISTENER_STANDIN_ECHO_DELAY_MS": "600",
            "LISTENER_STANDIN_DELIVERED_DELAY_MS": "1600",
            "LISTENER_STANDIN_SEEN_DELAY_MS": "2800",
        },
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
    )
    try:
        await asyncio.sleep(0.5)
        assert proc.returncode is None, f"the stand-in exited: {loop.stack.log_dir}"
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        log.close()


class ScriptedListener:
    """The account's listener played by the test through the ListenerService contract: it holds
    the account's lease, takes each order offered and reports what the test says, then forwards
    the echo and the customer's receipts as a listener does."""

    def __init__(self, port: int, account: int) -> None:
        self.channel = as_listener(port)
        self.listener = listener_service_pb2_grpc.ListenerServiceStub(self.channel)
        self.ingest = ingest_service_pb2_grpc.IngestServiceStub(self.channel)
        self.account = account
        self.epoch = 0
        self.stream: Any = None

    async def __aenter__(self) -> ScriptedListener:
        self.stream = self.listener.Listen(
            listener_service_pb2.ListenRequest(
                listener_id=f"browser-test-{uuid.uuid4().hex[:8]}", account_ids=[self.account]
            )
        )
        granted = await self._next("lease_granted")
        self.epoch = granted.lease_granted.epoch
        return self

    async def __aexit__(self, *_: object) -> None:
        self.stream.cancel()
        await self.channel.close()

    async def _next(self, kind: str) -> listener_service_pb2.ListenResponse:
        async with asyncio.timeout(20):
            while True:
                event = await self.stream.read()
                assert event is not grpc.aio.EOF, "the listen stream ended"
                if event.WhichOneof("event") == kind:
                    return event  # type: ignore[no-any-return]

    async def order(self) -> listener_service_pb2.SendOrder:
        return (await self._next("order")).order

    async def fail(self, order: listener_service_pb2.SendOrder, reason: str) -> None:
        await self.listener.ReportOutcome(
            listener_service_pb2.ReportOutcomeRequest(
                account_id=self.account,
                epoch=order.epoch,
                cli_msg_id=order.cli_msg_id,
                failed=listener_service_pb2.OrderFailed(
                    failure_class=message_pb2.FAILURE_CLASS_PERMANENT, reason=reason
                ),
            )
        )

    async def sent(self, order: listener_service_pb2.SendOrder) -> str:
        """Report the order sent and forward its echo; returns Zalo's msg_id for it."""
        msg_id = f"zalo-{uuid.uuid4().hex[:12]}"
        now = datetime.now(UTC)
        report = listener_service_pb2.ReportOutcomeRequest(
            account_id=self.account,
            epoch=order.epoch,
            cli_msg_id=order.cli_msg_id,
            sent=listener_service_pb2.OrderSent(msg_id=msg_id),
        )
        report.sent.sent_at.FromDatetime(now)
        await self.listener.ReportOutcome(report)
        echo = message_pb2.Message(
            msg_id=msg_id,
            cli_msg_id=order.cli_msg_id,
            thread_id=order.conversation_key,
            thread_type=message_pb2.THREAD_TYPE_USER,
            direction=message_pb2.DIRECTION_OUT,
            sender_id="shop",
            sender_name="Cửa hàng Demo",
            content=order.content,
            msg_type="webchat",
        )
        echo.sent_at.FromDatetime(now)
        await self.ingest.IngestMessages(
            ingest_service_pb2.IngestMessagesRequest(account_id=self.account, messages=[echo])
        )
        return msg_id

    async def receipt(self, thread: str, msg_id: str, kind: message_pb2.ReceiptKind) -> None:
        receipt = message_pb2.Receipt(
            receipt_id=f"r-{uuid.uuid4().hex[:12]}", thread_id=thread, msg_id=msg_id, kind=kind
        )
        receipt.at.FromDatetime(datetime.now(UTC))
        await self.ingest.IngestReceipts(
            ingest_service_pb2.IngestReceiptsRequest(account_id=self.account, receipts=[receipt])
        )


# --- What the page shows ------------------------------------------------------------------------


@asynccontextmanager
async def a_conversation(loop: Loop, env: Env) -> AsyncIterator[httpx.AsyncClient]:
    """Account 1's conversation THREAD with three messages from a customer, stored; yields an
    API client as user 7."""
    token = mint_token(env.jwt_secret, sub=7, accounts=[1])
    async with httpx.AsyncClient(base_url=loop.url, headers=bearer(token)) as api:
        now = datetime.now(UTC).replace(microsecond=0)
        texts = ["Chào shop 👋", "Áo này còn size M không ạ?", "Bao giờ giao được ạ?"]
        await ingest(
            api,
            [
                message(THREAD, f"{THREAD}-{i}", now - timedelta(minutes=5 - i), text)
                for i, text in enumerate(texts)
            ],
        )
        await stored(api, THREAD, 3)
        yield api


async def record_states(page: Page) -> None:
    """From now on, the page keeps each data-state every outgoing message of its timeline takes,
    by its text (window.replyStates: text -> [state, …], repeats left out)."""
    await page.evaluate(
        """() => {
        window.replyStates = {};
        const note = (el) => {
          if (!el.matches?.('.message.out')) return;
          const text = el.querySelector('.message-body')?.textContent ?? '';
          const states = (window.replyStates[text] ??= []);
          const state = el.dataset.state;
          if (state && states[states.length - 1] !== state) states.push(state);
        };
        new MutationObserver((changes) => {
          for (const change of changes) {
            if (change.type === 'attributes') note(change.target);
            for (const node of change.addedNodes ?? []) note(node);
          }
        }).observe(document.querySelector('.messages'), {
          subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'],
        });
      }"""
    )


async def states_of(page: Page, text: str) -> list[str]:
    states: list[str] = await page.evaluate("(text) => window.replyStates[text] ?? []", text)
    return states


def forward_only(states: list[str]) -> None:
    ranks = [RANK[s] for s in states]
    assert ranks == sorted(ranks), f"a state went backwards: {states}"


def shown(reply: Locator, state: str) -> Locator:
    """The reply's delivery state named exactly `state` (its role img's accessible name)."""
    return reply.get_by_role("img", name=state, exact=True)


def reply_of(page: Page, text: str) -> Locator:
    return page.locator(".message.out", has=page.locator(".message-body", has_text=text))


async def outgoing(api: httpx.AsyncClient, text: str) -> list[dict[str, Any]]:
    page = await api.get(
        "/api/zalo-accounts/1/messages", params={"conversation_key": THREAD, "limit": 100}
    )
    return [m for m in page.json()["data"] if m["direction"] == "out" and m["content"] == text]


async def composer_in_view(page: Page) -> None:
    """The reply box is on screen and nothing covers its middle."""
    box = page.get_by_label("Reply to", exact=False)
    await expect(box).to_be_in_viewport()
    on_top = await box.evaluate(
        """el => { const r = el.getBoundingClientRect();
          return document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2) === el; }"""
    )
    assert on_top, "something covers the reply box"


# --- The tests ----------------------------------------------------------------------------------


async def test_a_reply_goes_pending_sent_delivered_seen_live_in_both_agents_windows(
    loop: Loop, browser: Browser, env: Env
) -> None:
    text = "Dạ còn size M ạ, shop gửi ngay hôm nay 😀"
    async with (
        a_conversation(loop, env) as api,
        listener_standin(loop, [1]),
        watched_page(browser) as agent,
        watched_page(browser) as other,
    ):
        # Two agents of account 1: user 7 replies, user 1 watches.
        for watched, user in ((agent, 7), (other, 1)):
            await sign_in(watched, loop.url, user)
            await open_conversation(watched.page, THREAD)
            await record_states(watched.page)
        page = agent.page
        await composer_in_view(page)
        # Quote the customer's question through its Reply action.
        question = page.locator(f'.message[data-msg-id="{THREAD}-1"]')
        await question.get_by_role("button", name="Reply quoting this message").click()
        await expect(page.locator(".reply-quote")).to_contain_text("Áo này còn size M không ạ?")
        box = page.get_by_label("Reply to", exact=False)
        await expect(box).to_be_focused()
        await box.fill(text)
        await box.press("Enter")
        await expect(box).to_have_value("")
        await expect(page.locator(".reply-quote")).to_be_hidden()

        reply = reply_of(page, text)
        await expect(reply).to_have_count(1)
        await expect(reply.locator(".quote")).to_contain_text("Áo này còn size M không ạ?")
        # Through each state to Seen, without a reload; one message all along.
        await expect(shown(reply, "Sent")).to_have_text("✓", timeout=20_000)
        await expect(shown(reply, "Delivered")).to_have_text("✓✓")
        await expect(shown(reply, "Seen")).to_have_text("Seen")
        await expect(reply).to_have_count(1)
        mine = await states_of(page, text)
        assert mine[0] == "sending", mine
        assert {"sent", "delivered", "seen"} <= set(mine), mine
        forward_only(mine)
        # The other agent's window: the reply arrived live, and moved on to Seen too.
        theirs = reply_of(other.page, text)
        await expect(shown(theirs, "Seen")).to_be_visible()
        await expect(theirs).to_have_count(1)
        forward_only(await states_of(other.page, text))
        await agent.screenshot("reply-seen")

        # The server has it once, seen; a reload shows it once.
        [stored_reply] = await outgoing(api, text)
        assert stored_reply["delivery_state"] == "seen"
        assert stored_reply["seen_at"] is not None
        assert stored_reply["agent_user_id"] == 7
        assert stored_reply["quote_msg_id"] == f"{THREAD}-1"
        await page.reload()
        await open_conversation(page, THREAD)
        await expect(reply_of(page, text)).to_have_count(1)
        await expect(shown(reply_of(page, text), "Seen")).to_be_visible()
        agent.assert_clean()
        other.assert_clean()


async def test_offline_the_reply_waits_and_goes_once_and_a_lost_answer_is_sent_again_once(
    loop: Loop, browser: Browser, env: Env
) -> None:
    offline_text = "Gửi khi mất mạng"
    lost_text = "Gửi khi mất câu trả lời"
    async with (
        a_conversation(loop, env) as api,
        listener_standin(loop, [1]),
        watched_page(browser) as agent,
    ):
        page = agent.page
        await sign_in(agent, loop.url, 7)
        await open_conversation(page, THREAD)
        keys: list[str | None] = []
        lost = asyncio.Event()

        async def sends(route: Route) -> None:
            if route.request.method != "POST":
                await route.fallback()
                return
            keys.append(await route.request.header_value("idempotency-key"))
            body = route.request.post_data or ""
            if lost_text in body and not lost.is_set():
                # The gateway takes it and stores the order; its answer never reaches the page.
                answer = await route.fetch()
                assert answer.status == 202, await answer.text()
                lost.set()
                await route.abort("connectionreset")
                return
            await route.fallback()

        await page.route(f"**/api/zalo-accounts/1/conversations/{THREAD}/messages", sends)
        box = page.get_by_label("Reply to", exact=False)

        # Offline: the reply shows at once and waits; back online, it goes, once.
        await agent.page.context.set_offline(True)
        await box.fill(offline_text)
        await box.press("Enter")
        waiting = reply_of(page, offline_text)
        await expect(waiting).to_have_attribute("data-state", "waiting")
        await expect(waiting.get_by_role("img", name="Offline", exact=False)).to_be_visible()
        await page.wait_for_timeout(1000)
        assert keys == []  # nothing tried while offline
        await agent.page.context.set_offline(False)
        await expect(shown(waiting, "Sent")).to_be_visible(timeout=20_000)
        assert len(keys) == 1

        # The answer lost: sent again with the same key, stored once, shown once.
        keys.clear()
        await box.fill(lost_text)
        await box.press("Enter")
        again = reply_of(page, lost_text)
        await expect(shown(again, "Sent")).to_be_visible(timeout=20_000)
        assert lost.is_set()
        assert len(keys) >= 2
        assert len(set(keys)) == 1, keys
        await expect(again).to_have_count(1)

        for text in (offline_text, lost_text):

            async def once(text: str = text) -> bool:
                return len(await outgoing(api, text)) == 1

            await until(f"{text!r} stored", once)
            await page.wait_for_timeout(500)
            assert len(await outgoing(api, text)) == 1
        agent.assert_clean()


async def test_a_failed_reply_says_why_and_retry_sends_it_on_a_phone(
    loop: Loop, browser: Browser, env: Env
) -> None:
    text = "Shop xin lỗi, hết size M rồi ạ"
    reason = "Khách hàng đã chặn tin nhắn từ shop"
    context = await browser.new_context(
        viewport=PHONE, locale="vi-VN", timezone_id="UTC", is_mobile=True, has_touch=True
    )
    try:
        page = await context.new_page()
        phone = Watched(page)
        page.on("pageerror", lambda error: phone.errors.append(f"uncaught: {error}"))
        async with (
            a_conversation(loop, env) as api,
            ScriptedListener(loop.ingest_port, 1) as listener,
        ):
            await sign_in(phone, loop.url, 7)
            # A phone shows the list first; the conversation then takes the screen.
            await open_conversation(page, THREAD)
            await expect(page.locator(".sidebar")).to_be_hidden()
            await composer_in_view(page)
            box = page.get_by_label("Reply to", exact=False)
            await box.fill(text)
            await page.get_by_role("button", name="Send", exact=True).click()
            reply = reply_of(page, text)
            await expect(reply).to_have_attribute("data-state", "queued")
            await composer_in_view(page)  # the reply did not push the box off screen

            order = await listener.order()
            assert order.content == text
            assert order.cli_msg_id == await reply.get_attribute("data-cli-msg-id")
            await listener.fail(order, reason)
            await expect(reply).to_have_attribute("data-state", "failed")
            await expect(reply.locator(".failure-reason")).to_have_text(reason)
            await expect(reply.get_by_role("img", name=f"Not sent: {reason}")).to_be_visible()
            await phone.screenshot("reply-failed-phone")

            await reply.get_by_role("button", name="Retry").click()
            again = await listener.order()
            assert again.cli_msg_id == order.cli_msg_id  # the same order, queued again
            await expect(reply).not_to_have_attribute("data-state", "failed")
            msg_id = await listener.sent(again)
            await expect(shown(reply, "Sent")).to_be_visible()
            await listener.receipt(THREAD, msg_id, message_pb2.RECEIPT_KIND_DELIVERED)
            await expect(shown(reply, "Delivered")).to_be_visible()
            await listener.receipt(THREAD, msg_id, message_pb2.RECEIPT_KIND_SEEN)
            await expect(shown(reply, "Seen")).to_have_text("Seen")
            await expect(reply).to_have_attribute("data-msg-id", msg_id)
            await expect(reply).to_have_count(1)
            assert len(await outgoing(api, text)) == 1
            assert phone.errors == []
    finally:
        await context.close()
