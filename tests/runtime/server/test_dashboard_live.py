"""The run page's timeline in Chromium while the run goes on: events committed while a
timeline page is on its way are shown once it arrives, not lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .support import AUTH, served
from .test_dashboard import _need_browser, browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_events_committed_while_the_last_timeline_page_loads_join_the_timeline(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        paused = await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/runs/{run_id}")
        rows = page.locator("#timeline tbody tr")
        await expect(rows).to_have_count(paused["summary"]["last_seq"])

        # The next timeline page is answered by the server at once (the log as it is) but
        # reaches the page only after the run went on to its end, live events and all.
        held: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue()
        holding = asyncio.Event()

        async def hold(route: Any) -> None:
            if holding.is_set():  # the pages after it go through
                await route.continue_()
                return
            holding.set()
            await held.put((route, await route.fetch()))

        await page.route("**/api/runs/*/events?*", hold)
        await page.locator('input[data-category="run"]').uncheck()
        route, answer = await held.get()
        approved = await s.client.post(
            f"/api/runs/{run_id}/approve", json={"input": {"ok": True}, "by": "ann"}, headers=AUTH
        )
        assert approved.status_code == 202
        done = await s.wait_status(run_id, "completed")
        # The live stream told the page: its head shows the end of the run.
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        await route.fulfill(response=answer)

        query = urlsplit(route.request.url).query
        everything = (await s.client.get(f"/api/runs/{run_id}/events?{query}")).json()
        wanted = [str(e["seq"]) for e in everything["events"]]
        assert wanted[-1] == str(done["summary"]["last_seq"] - 1)  # all but run.finished
        await expect(rows).to_have_count(len(wanted))
        assert [await row.get_attribute("data-seq") for row in await rows.all()] == wanted
