"""A run's page says which checks did not run (judge failures), apart from its quality."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import ProviderError
from runtime.testing import ScriptedProvider, reply, tool_call

from .support import AUTH, TOKEN, served
from .test_dashboard import _need_browser, browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


def judge_down() -> ScriptedProvider:
    refused = ProviderError("judge", "temperature is not supported", status=400)
    return ScriptedProvider(
        [reply("", tool_call("set_output", key="draft", value="TP 1234")), reply("Done.")],
        judge=[refused] * 3,
    )


async def test_the_run_page_lists_the_judge_failures_with_their_reasons(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db", provider=judge_down()) as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "reviewed"}, headers=AUTH)
        run_id = started.json()["run_id"]
        detail = await s.wait_status(run_id, "paused")
        failures = detail["judge_failures"]
        assert (failures["total"], failures["by_kind"]) == (1, {"judge": 1})
        [kept] = failures["reasons"]
        assert kept["node_id"] == "draft" and "temperature is not supported" in kept["reason"]

        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        box = page.locator("#run-head #judge-failures")
        await expect(box).to_contain_text("Judge failures: 1 (1 judge)")
        item = box.locator('li[data-kind="judge"]')
        await expect(item).to_have_count(1)
        await expect(item).to_contain_text(f"seq {kept['seq']} · judge at draft: ")
        await expect(item).to_contain_text("temperature is not supported")

        # A run whose checks all ran shows no such field.
        quick = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        quick_id = quick.json()["run_id"]
        assert (await s.wait_status(quick_id, "paused"))["judge_failures"] is None
        await page.goto(f"{s.url}/runs/{quick_id}#token={TOKEN}")
        await expect(page.locator("#run-head #chain")).to_be_visible()
        await expect(page.locator("#judge-failures")).to_have_count(0)
