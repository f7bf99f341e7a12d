"""The dashboard's actions and controls as a hurried user and a keyboard user meet them, in
a real headless Chromium: a double click starts, approves, forks or resumes once (not a
second run, fork or a refused second decision), the timeline is used from the keyboard,
every field and button has a name a screen reader can say, and a server that asks the
token for reads gets it from the page, which then shows what the 401 kept from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime import Runtime
from runtime.server import create_app

from .support import AUTH, FUNCTIONS, QUICK, TOKEN, Served, live_server, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


def posts(page: Any) -> list[str]:
    """The paths of the POSTs the page sends, as it sends them."""
    sent: list[str] = []
    page.on(
        "request",
        lambda r: sent.append(r.url.split("/api/", 1)[-1]) if r.method == "POST" else None,
    )
    return sent


async def test_a_double_click_acts_once(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        sent = posts(page)
        await page.goto(f"{s.url}/#token={TOKEN}")
        await page.select_option("select[name=graph]", "quick")
        await page.get_by_role("button", name="Start", exact=True).dblclick()
        await page.wait_for_url(re.compile(r"/runs/"))
        run_id = page.url.rsplit("/", 1)[-1]
        await expect(page.locator("#run-head .badge.s-paused")).to_be_visible()
        assert sent == ["runs"]
        listed = (await s.client.get("/api/runs")).json()["runs"]
        assert [r["run_id"] for r in listed] == [run_id]

        form = page.locator("form.approve")
        await form.locator('textarea[data-key="ok"]').fill("1")
        await form.locator("input.by").fill("ann")
        await form.get_by_role("button", name="Approve and resume").dblclick()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        await expect(page.locator("#recorded")).to_contain_text("Approved by ann")
        await expect(page.locator("#recorded .refused")).to_have_count(0)
        assert sent == ["runs", f"runs/{run_id}/approve"]

        await page.locator('#timeline tr[data-seq="2"]').click()
        await page.locator("#fork").dblclick()
        await expect(page.locator("#travel a")).to_have_count(1)
        fork_id = await page.locator("#travel a").inner_text()
        assert sent[2:] == [f"runs/{run_id}/fork"]

        cancel = await s.client.post(f"/api/runs/{fork_id}/cancel", json={}, headers=AUTH)
        assert cancel.status_code == 202
        await s.wait_status(fork_id, "cancelled")
        await page.goto(f"{s.url}/runs/{fork_id}")
        await page.get_by_role("button", name="Resume").dblclick()
        await expect(page.locator("#run-head .badge.s-paused")).to_be_visible()
        await expect(page.locator("#recorded .refused")).to_have_count(0)
        assert sent[3:] == [f"runs/{fork_id}/resume"]


async def test_the_timeline_is_used_from_the_keyboard(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator('#timeline tr[data-seq="1"]')).to_be_visible()
        # From the last filter, Tab goes on into the timeline's rows (the table's box
        # itself may take a stop first).
        await page.locator('input[data-category="run"]').focus()
        for _ in range(3):
            await page.keyboard.press("Tab")
            if await page.evaluate("() => document.activeElement.tagName") == "TR":
                break
        focused = await page.evaluate("() => document.activeElement.dataset.seq")
        assert focused == "1"
        await page.keyboard.press("Enter")
        await expect(page.locator("#travel h2").first).to_contain_text("State after seq 1")
        await page.keyboard.press("Tab")
        await page.keyboard.press(" ")
        await expect(page.locator("#travel h2").first).to_contain_text("State after seq 2")
        await expect(page.locator("#timeline tr.selected")).to_have_attribute("data-seq", "2")


async def test_every_field_and_button_has_a_name(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async def named(page: Any, where: str) -> None:
        controls = page.locator("input, select, textarea, button")
        assert await controls.count() > 3, where
        for control in await controls.all():
            if await control.is_visible():
                await expect(control).to_have_accessible_name(re.compile(r"\S"))

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/")
        await expect(page.locator("#runs tbody tr[data-run]")).to_have_count(1)
        await named(page, "runs")
        await page.goto(f"{s.url}/runs/{run_id}")
        await page.locator('#timeline tr[data-seq="1"]').click()
        await expect(page.locator("#fork-input")).to_be_visible()
        await named(page, "run")
        await expect(page.get_by_label("input to inject (JSON object)")).to_be_visible()
        await page.goto(f"{s.url}/approvals")
        await expect(page.locator("#approvals .card")).to_have_count(1)
        await named(page, "approvals")


async def test_the_token_given_on_the_page_shows_what_a_401_kept_from_it(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN, read_token=True)
        async with (
            live_server(app) as url,
            httpx.AsyncClient(base_url=url, headers=AUTH) as client,
            browser_page() as page,
        ):
            run = await rt.start(QUICK, input={})
            await Served(url, rt, client).wait_status(run.run_id, "paused")
            # A fragment that is not valid percent-encoding: the page still loads, and
            # says the token it took was refused.
            await page.goto(f"{url}/#token=%zz")
            body = page.locator("#runs tbody")
            await expect(body).to_contain_text("401: the API token was refused")
            await expect(page.locator("#live")).to_contain_text("401")
            await page.get_by_role("button", name="forget").click()
            await expect(body).to_contain_text("401: set the API token first (top right)")
            # Typed and sent with Enter: the runs are read again, and the stream is live.
            await page.get_by_label("API token").fill(TOKEN)
            await page.keyboard.press("Enter")
            await expect(page.locator(f'#runs tr[data-run="{run.run_id}"]')).to_be_visible()
            await expect(page.locator("#live")).to_have_attribute("data-state", "live")
