"""The trace sink's browser view in a real browser (Debian's Chromium, driven by Playwright).

The sink runs as `make up TRACES=1` runs it (`python -m tools.trace_sink`), on free ports with a
temporary database; the OpenTelemetry SDK exports two traces to it over OTLP/gRPC (gateway →
ingest with a failed XADD, then a gateway-only one). The page lists them, opens one as a
waterfall, and shows a span's attributes on click. Screenshots: tests/output/trace-*.png.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import FloatRect, Locator, Page, async_playwright, expect

from services.keyspace import PREFIXES
from tests.observability.trace_support import (
    GET_ROUTE,
    INGEST_RPC,
    POST_ROUTE,
    export_sample,
)
from tools.ports import free_port
from tools.waiting import until

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "tests" / "output"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))


class Sink:
    def __init__(self, otlp_port: int, view: str) -> None:
        self.otlp_port = otlp_port
        self.view = view


@pytest_asyncio.fixture
async def sink(tmp_path: Path) -> AsyncIterator[Sink]:
    otlp_port, http_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.trace_sink",
        "--port",
        str(otlp_port),
        "--db",
        str(tmp_path / "traces.sqlite"),
        "--http-port",
        str(http_port),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    view = f"http://127.0.0.1:{http_port}"
    try:
        async with httpx.AsyncClient(base_url=view) as http:

            async def answered_or_exited() -> bool:  # an exit is reported below, with its output
                if process.returncode is not None:
                    return True
                return (await http.get("/api/traces")).status_code == 200

            await until(
                "the trace sink's view to answer",
                answered_or_exited,
                10,
                every=0.1,
                ignoring=(httpx.TransportError,),
            )
        if process.returncode is not None:
            assert process.stdout is not None
            output = (await process.stdout.read()).decode()
            pytest.fail(f"the trace sink exited ({process.returncode}):\n{output}")
        yield Sink(otlp_port, view)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        output = (await process.communicate())[0].decode()
    returncode = await process.wait()
    assert returncode == 0, output  # SIGTERM stops the receiver and the view cleanly
    assert f"trace view on {view}/" in output


async def box(locator: Locator) -> FloatRect:
    rect = await locator.bounding_box()
    assert rect is not None, locator
    return rect


async def bar_color(page: Page, index: int) -> str:
    return str(
        await page.locator("#waterfall .bar")
        .nth(index)
        .evaluate("node => getComputedStyle(node).backgroundColor")
    )


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium (the project's set-up installs it; Playwright never downloads one)."""
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: the project's set-up installs chromium"
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return CHROMIUM


async def test_recent_traces_open_as_a_waterfall_with_attributes_on_click(
    sink: Sink, chromium: Path
) -> None:
    sample = await asyncio.to_thread(export_sample, sink.otlp_port)

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1360, "height": 760})
            requested: list[str] = []
            problems: list[str] = []
            page.on("request", lambda request: requested.append(request.url))
            page.on(
                "console",
                lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
            )
            page.on("pageerror", lambda e: problems.append(str(e)))

            # The list: newest first, root span, services, span and error counts.
            await page.goto(f"{sink.view}/")
            rows = page.locator("#traces tbody tr")
            await expect(rows).to_have_count(2)
            assert [await r.get_attribute("data-trace-id") for r in await rows.all()] == [
                sample.ok,
                sample.failed,
            ]
            failed = page.locator(f'tr[data-trace-id="{sample.failed}"]')
            await expect(failed.locator(".root-name")).to_have_text(POST_ROUTE)
            await expect(failed.locator("td.services .chip")).to_have_text(["gateway", "ingest"])
            await expect(failed.locator("td").nth(3)).to_have_text("30.0 ms")
            await expect(failed.locator("td").nth(4)).to_have_text("4")
            await expect(failed.locator(".badge-error")).to_have_text("1")
            ok = page.locator(f'tr[data-trace-id="{sample.ok}"]')
            await expect(ok.locator(".root-name")).to_have_text(GET_ROUTE)
            await expect(ok.locator(".badge-error")).to_have_count(0)
            await page.screenshot(path=str(OUTPUT / "trace-list.png"), full_page=True)

            # The service filter keeps the traces that touch the service.
            await page.select_option("#service", "ingest")
            await expect(rows).to_have_count(1)
            await expect(rows.first).to_have_attribute("data-trace-id", sample.failed)

            # One trace: a waterfall, nested by parent, across both services.
            await failed.locator(".root-name").click()
            await expect(page).to_have_url(re.compile(f"#/trace/{sample.failed}$"))
            spans = page.locator("#waterfall .row")
            await expect(spans).to_have_count(4)
            await expect(page.locator("#trace-title")).to_contain_text(POST_ROUTE)
            await expect(page.locator("#trace-meta")).to_contain_text("1 error")
            await expect(page.locator("#legend .chip")).to_have_text(["gateway", "ingest"])
            await expect(spans.locator(".name")).to_have_text(
                [POST_ROUTE, INGEST_RPC, INGEST_RPC, "XADD agora:msg"]
            )
            await expect(spans.locator(".svc")).to_have_text(
                ["gateway", "gateway", "ingest", "ingest"]
            )
            assert [await s.get_attribute("data-depth") for s in await spans.all()] == [
                "0",
                "1",
                "2",
                "3",
            ]
            rows_x = [(await box(s))["x"] for s in await spans.all()]
            assert len(set(rows_x)) == 1  # the rows line up
            names_x = [(await box(s.locator(".name")))["x"] for s in await spans.all()]
            assert names_x == sorted(names_x), names_x  # each name indented under its parent
            assert len(set(names_x)) == 4, names_x

            # Bars: each child within its parent, widths in proportion to the durations.
            bars = [await box(b) for b in await page.locator("#waterfall .bar").all()]
            for parent, child in itertools.pairwise(bars):
                assert child["x"] > parent["x"]
                assert child["x"] + child["width"] < parent["x"] + parent["width"]
            assert bars[3]["width"] / bars[0]["width"] == pytest.approx(12 / 30, abs=0.02)
            # Colored by service.
            gateway, ingest = await bar_color(page, 0), await bar_color(page, 2)
            assert gateway != ingest
            assert await bar_color(page, 1) == gateway
            assert await bar_color(page, 3) == ingest
            await expect(page.locator("#waterfall .span.error")).to_have_count(1)
            await expect(page.locator("#waterfall .span.error .name")).to_have_text(
                "XADD agora:msg"
            )

            # A click shows the span's attributes, status and events; another hides them.
            xadd = spans.nth(3)
            await expect(page.locator(".detail")).to_have_count(0)
            await xadd.click()
            await expect(xadd).to_have_attribute("aria-expanded", "true")
            detail = page.locator(".span.error .detail")
            await expect(detail).to_be_visible()
            attrs = detail.locator("table.attrs").first
            await expect(attrs.locator("th")).to_have_text(
                ["messaging.destination.name", "messaging.system"]
            )
            await expect(attrs.locator("td")).to_have_text([PREFIXES["messages"], "redis"])
            await expect(detail.locator(".facts")).to_contain_text("error: backlog full")
            await expect(detail.locator(".facts")).to_contain_text("producer")
            await expect(detail.locator("table.event caption")).to_contain_text("exception")
            await expect(detail.locator("table.event")).to_contain_text("RuntimeError")

            root = spans.nth(0)
            await root.click()
            root_detail = page.locator("#waterfall .span").nth(0).locator(".detail")
            await expect(
                root_detail.locator("tr", has=page.locator("th", has_text="http.route"))
            ).to_contain_text("/api/zalo-accounts/{account_id}/messages")
            await expect(
                root_detail.locator("tr", has_text="http.response.status_code")
            ).to_have_text(re.compile(r"503"))
            await page.screenshot(path=str(OUTPUT / "trace-view.png"), full_page=True)
            await root.click()
            await expect(root_detail).to_be_hidden()

            # Back to the list; an unknown trace says so in words.
            await page.locator("a.back").click()
            await expect(page.locator("#list-view")).to_be_visible()
            await page.goto(f"{sink.view}/#/trace/{'0' * 32}")
            await expect(page.locator("#error")).to_contain_text("No trace")
            problems = [p for p in problems if "404" not in p]  # the unknown trace's fetch

            origin = f"{sink.view}/"
            assert requested
            assert [url for url in requested if not url.startswith(origin)] == []
            assert problems == []
        finally:
            await browser.close()
