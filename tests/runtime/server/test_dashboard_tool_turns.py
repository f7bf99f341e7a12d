"""Tool-call turns on a run's page: shown as tool turns, never as judged RETRY verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import AUTH, TOKEN, served
from .test_dashboard import _need_browser, browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_tool_turns_are_shown_as_tool_turns_not_retry_verdicts(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "reviewed"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        events = (await s.client.get(f"/api/runs/{run_id}/events")).json()["events"]
        tool_turns = [
            e["seq"]
            for e in events
            if e["type"] == "judge.verdict" and e["body"]["level"] == "bail_out"
        ]
        assert len(tool_turns) == 2  # the draft script's two set_output turns

        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        strip = page.locator('#verdicts .strip-block[data-node="draft"]')
        pills = strip.locator(".verdict")
        await expect(pills).to_have_count(4)
        actions = await pills.evaluate_all("ps => ps.map(p => p.dataset.action)")
        assert actions == ["TOOL", "RETRY", "TOOL", "ACCEPT"]
        # The heading counts the judged verdicts, and the tool turns apart.
        await expect(strip.locator("h2 .muted")).to_have_text("2 verdicts, 2 tool turns")
        detail = (await s.client.get(f"/api/runs/{run_id}")).json()
        (draft,) = [n for n in detail["llm_nodes"] if n["node_id"] == "draft"]
        assert (draft["total_verdicts"], draft["tool_turns"]) == (2, 2)
        # Every count on the pages reads in the number it needs.
        said = await page.evaluate("[plural(1, 'event'), plural(1200, 'entry', 'entries')]")
        assert said == ["1 event", "1,200 entries"]
        await expect(strip.locator('.verdict[data-action="TOOL"]').first).to_have_text(
            "TOOL turn #1"
        )
        for seq in tool_turns:
            row = page.locator(f'#timeline tr[data-seq="{seq}"]')
            await expect(row).to_contain_text("tool turn")
            await expect(row).to_contain_text("not judged")
