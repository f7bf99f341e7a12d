"""The dashboard's live updates under strain, in a real headless Chromium: a run that
writes events without a pause still updates its page and the runs table while it goes on
(a refresh put off until the events stop would show a stale run as current), a read of the
run that fails says the page is as of its last read and is tried again, and a server that
goes away under open pages is said to be gone, a request made meanwhile says it got no
answer, and once the server is back the pages read what changed meanwhile."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.server import create_app

from .support import AUTH, FUNCTIONS, QUICK, TOKEN, Served, live_server, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]

#: Ends the STEADY run once set.
STOP = threading.Event()


async def pace(inputs: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.01)  # a node's short piece of work: events every few ms
    return {"count": 10**9 if STOP.is_set() else inputs.get("count", 0) + 1}


FUNCTIONS["pace"] = pace

#: A run that writes events, a few every 10 ms, until STOP is set.
STEADY = GraphSpec(
    id="steady",
    nodes=[
        NodeSpec(id="tick", kind="function", function="pace", input_keys=["count"]),
        NodeSpec(id="done", kind="function", function="step"),
    ],
    edges=[
        EdgeSpec(
            source="tick", target="tick", condition="conditional", expression="count < 100000000"
        ),
        EdgeSpec(source="tick", target="done", condition="always"),
    ],
    entry_node="tick",
    max_steps=1_000_000,
)


async def test_a_run_that_never_stops_writing_still_updates_its_page_and_the_runs_table(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    STOP.clear()
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[STEADY], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            s = Served(url, rt, client)
            handle = await rt.start(STEADY, input={})
            try:
                async with browser_page() as page:
                    await page.goto(f"{url}/runs/{handle.run_id}")
                    head = page.locator("#run-head .row > span.muted")
                    await expect(head).to_contain_text("events")
                    shown = re.match(r"[\d,]+", await head.inner_text())
                    assert shown is not None
                    # The head is read again while the events go on coming.
                    await expect(head).not_to_have_text(
                        re.compile(rf"^{shown[0]} events"), timeout=30_000
                    )
                    await expect(page.locator("#run-head .badge.s-running")).to_be_visible()

                    await page.goto(f"{url}/")
                    count = page.locator(f'#runs tr[data-run="{handle.run_id}"] td').last
                    await expect(count).to_have_text(re.compile(r"\d"))
                    first = await count.inner_text()
                    await expect(count).not_to_have_text(first, timeout=30_000)
                    running = (await client.get(f"/api/runs/{handle.run_id}")).json()
                    assert running["summary"]["status"] == "running"
            finally:
                STOP.set()
                await asyncio.wait_for(s.wait_status(handle.run_id, "completed", "failed"), 60)


@asynccontextmanager
async def serving(app: Any, port: int = 0) -> AsyncIterator[int]:
    """``app`` on a loopback ``port`` (0: a free one); yields the port. Leaving stops the
    server (an open stream is cut a second later), as a restart does."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        sock.close()


async def test_a_page_says_the_server_is_gone_and_catches_up_when_it_is_back(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN)
        async with browser_page() as runs:
            run = await runs.context.browser.new_page()
            async with serving(app) as port:
                url = f"http://127.0.0.1:{port}"
                first = await rt.start(QUICK, input={})
                async with httpx.AsyncClient(base_url=url) as client:
                    await Served(url, rt, client).wait_status(first.run_id, "paused")
                await runs.goto(f"{url}/#token={TOKEN}")
                await expect(runs.locator("#runs tbody tr[data-run]")).to_have_count(1)
                await run.goto(f"{url}/runs/{first.run_id}")
                await expect(run.locator("#run-head .badge.s-paused")).to_be_visible()
                for page in (runs, run):
                    await expect(page.locator("#live")).to_have_attribute("data-state", "live")

            # The server is gone: both pages say so, and a read asked for meanwhile says
            # it got no answer (not the browser's "Failed to fetch" alone).
            for page in (runs, run):
                await expect(page.locator("#live")).to_have_attribute("data-state", "lost")
                await expect(page.locator("#live")).to_contain_text("live updates lost")
            await run.locator('#timeline tr[data-seq="1"]').click()
            await expect(run.locator("#travel .error")).to_contain_text("cannot reach the server")

            # Meanwhile the first run is approved and another starts (and pauses).
            await rt.approve(first.run_id, input={"ok": 1}, by="ann")
            second = await rt.start(QUICK, input={})
            async with serving(app, port):
                async with httpx.AsyncClient(base_url=url) as client:
                    s = Served(url, rt, client)
                    await s.wait_status(first.run_id, "completed")
                    await s.wait_status(second.run_id, "paused")
                for page in (runs, run):
                    await expect(page.locator("#live")).to_have_attribute(
                        "data-state", "live", timeout=30_000
                    )
                # What changed while the server was gone is shown.
                await expect(runs.locator("#runs tbody tr[data-run]")).to_have_count(2)
                done = runs.locator(f'#runs tr[data-run="{first.run_id}"] .badge.s-completed')
                await expect(done).to_be_visible()
                await expect(run.locator("#run-head .badge.s-completed")).to_be_visible()


async def test_a_failed_read_of_the_run_says_so_and_is_tried_again(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import Route, expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator("#run-head .badge.s-paused")).to_be_visible()

        async def busy(route: Route) -> None:
            await route.fulfill(
                status=503,
                content_type="application/json",
                body='{"error": "unavailable", "detail": "the store is busy"}',
            )

        detail = re.compile(rf"/api/runs/{run_id}$")
        await page.route(detail, busy)
        approve = {"input": {"ok": 1}, "by": "ann"}
        approved = await s.client.post(f"/api/runs/{run_id}/approve", json=approve, headers=AUTH)
        assert approved.status_code == 202
        await s.wait_status(run_id, "completed")
        # The live events came; the read they asked for failed: the page says so.
        stale = page.locator("#stale")
        await expect(stale).to_contain_text("Could not read the run again: the store is busy")
        await expect(page.locator("#run-head .badge.s-paused")).to_be_visible()
        await page.unroute(detail, busy)
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible(timeout=30_000)
        await expect(stale).to_have_text("")
