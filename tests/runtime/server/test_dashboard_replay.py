"""The run page replays a run: against its recorded graph (no divergence) and against
another graph the server has (the divergence, its seq and its reason), in Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import TOKEN, served
from .test_dashboard import _need_browser, browser_page
from .test_replay_route import _reviewed_run

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_the_run_page_replays_a_run_and_shows_its_divergences(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id = await _reviewed_run(s)
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        card = page.locator("#replay-card")
        await page.locator("#replay").click()
        await expect(card.locator("#replay-verdict")).to_contain_text("No divergence")
        await expect(card.locator("#replay-verdict")).to_contain_text(
            "6 model answers served from the log"
        )
        await expect(card.locator("#replay-divergences")).to_have_count(0)

        # Another graph the server has: the run's first node is not in it.
        await expect(page.locator('#replay-graph option[value="quick"]')).to_have_count(1)
        await page.locator("#replay-graph").select_option("quick")
        await page.locator("#replay").click()
        await expect(card.locator("#replay-verdict")).to_contain_text("divergence")
        first = card.locator("#replay-divergences li").first
        await expect(first).to_have_attribute("data-seq", "2")
        await expect(first).to_contain_text("seq 2 · node.started: ")
        await expect(first).to_contain_text("node `draft` is no longer in the graph")
