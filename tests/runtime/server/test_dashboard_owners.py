"""The dashboard in Chromium when a run's owner dies: its claim expires with nothing written
to the log, so no live event announces it; the pages showing the run notice anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import HELD, served
from .test_dashboard import _need_browser, browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_a_dead_owner_leaves_the_runs_table_and_the_run_page_once_its_lease_expires(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id = await s.runtime.submit(HELD, input={})
        # A worker claims the run and dies at once: it never renews its 2-second lease and
        # never appends (as a worker killed with SIGKILL before its first event).
        assert s.runtime.store is not None
        await s.runtime.store.claim(run_id, "dead-worker", lease=2.0)
        listed = (await s.client.get("/api/runs")).json()["runs"]
        assert [(r["owner"], r["ownership"]) for r in listed] == [("dead-worker", "claimed")]

        await page.goto(f"{s.url}/")
        owner = page.locator(f'#runs tr[data-run="{run_id}"] td.owner')
        await expect(owner).to_have_text("dead-worker")
        # Once the lease expired the listing says the run waits for a worker, and the
        # page, which got no live event, says so too instead of naming the dead worker.
        await expect(owner).to_have_text("waiting for a worker", timeout=30_000)
        await expect(owner).to_have_attribute("data-ownership", "waiting")

        await s.runtime.store.claim(run_id, "dead-worker-2", lease=2.0)
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator("#owner")).to_have_text("owner dead-worker-2")
        await expect(page.locator("#owner")).to_have_text("waiting for a worker", timeout=30_000)
        summary = (await s.client.get(f"/api/runs/{run_id}")).json()["summary"]
        assert (summary["status"], summary["owner"], summary["ownership"]) == (
            "running",
            None,
            "waiting",
        )


async def test_a_draining_run_shows_its_draining_node_in_the_table_and_on_its_page(
    tmp_path: Path,
) -> None:
    _need_browser()
    import anyio
    from playwright.async_api import expect

    from runtime import Runtime
    from tests.runtime.test_draining import GRAPH, Blocking

    path = tmp_path / "runs.db"
    blocking = Blocking()
    async with (
        served(path) as s,
        Runtime(path, functions=blocking.functions()) as here,
        browser_page() as page,
    ):
        try:
            handle = await here.start(GRAPH)
            await anyio.to_thread.run_sync(blocking.entered.wait, 30)
            await here.cancel(handle.run_id)
            await handle.result()  # its thread runs on: the claim is kept, marked draining
            await page.goto(f"{s.url}/")
            owner = page.locator(f'#runs tr[data-run="{handle.run_id}"] td.owner')
            await expect(owner).to_contain_text(f"{here.worker_id} (draining work since ")
            await page.goto(f"{s.url}/runs/{handle.run_id}")
            await expect(page.locator("#owner")).to_contain_text("(draining work since ")
            blocking.release.set()
            # The claim goes with the attempt's end; the page reads it again.
            await expect(page.locator("#owner")).to_have_count(0, timeout=30_000)
        finally:
            blocking.release.set()
