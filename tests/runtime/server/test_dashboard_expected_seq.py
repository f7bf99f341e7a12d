"""The dashboard's approval form decides on what it shows: it sends the run's last seq as
it drew the form (``expected_seq``), so a run that moved on since is refused by the
library, and the refusal is shown (a real headless Chromium)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .support import AUTH, TOKEN, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_the_form_sends_the_seq_it_shows_and_a_moved_run_is_refused(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import Route, expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post(
            "/api/runs", json={"graph": "quick", "input": {"ok": 1}}, headers=AUTH
        )
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        shown = (await s.client.get(f"/api/runs/{run_id}")).json()["summary"]["last_seq"]
        sent: list[dict[str, Any]] = []

        async def hold(route: Route) -> None:
            # The run moves on (a cancel, a resume with other input: at the gate again)
            # between the form being drawn and its request reaching the server.
            sent.append(json.loads(route.request.post_data or "{}"))
            cancel = await s.client.post(f"/api/runs/{run_id}/cancel", json={}, headers=AUTH)
            assert cancel.status_code == 202, cancel.text
            await s.wait_status(run_id, "cancelled")
            resumed = await s.client.post(
                f"/api/runs/{run_id}/resume", json={"input": {"ok": 2}}, headers=AUTH
            )
            assert resumed.status_code == 202, resumed.text
            await s.wait_status(run_id, "paused")
            await route.continue_()

        await page.route(f"**/api/runs/{run_id}/approve", hold)
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        form = page.locator("form.approve")
        await form.locator("input.by").fill("ann")
        await form.locator("text=Approve and resume").click()
        refused = page.locator("#recorded .refused")
        await expect(refused).to_contain_text("approve refused")
        await expect(refused).to_contain_text(f"moved on since seq {shown}")
        assert sent == [{"by": "ann", "input": {}, "expected_seq": shown}]
        events = (await s.client.get(f"/api/runs/{run_id}/events")).json()["events"]
        assert not [e for e in events if e["type"].startswith("approval.")]
