"""The run page in Chromium names a started node of a run nothing executes as
``magistrate state`` does: "interrupted: X (waiting for a worker)" once its worker handed
the run back, "(the run was cancelled)" once cancelled; "at node X" only while something
executes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, RecoveryConfig, Runtime
from tests.pgsupport import wait_until

from .support import AUTH, TOKEN, served
from .test_dashboard import _need_browser, browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(60)  # until its worker closes (and hands the run back)
    return {"done": True}


def noted(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"noted": True}


SLOW = GraphSpec(
    id="slow",
    nodes=[
        NodeSpec(id="wait", kind="function", function="slow"),
        NodeSpec(id="after", kind="function", function="noted"),
    ],
    edges=[EdgeSpec(source="wait", target="after")],
    entry_node="wait",
)


async def test_the_run_page_says_a_node_nothing_executes_is_interrupted(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    path = tmp_path / "runs.db"
    async with served(path) as s, browser_page() as page:
        run_id = await s.runtime.submit(SLOW)
        async with Runtime(
            path, functions={"slow": slow, "noted": noted}, recovery=RecoveryConfig(interval=0.05)
        ) as worker:

            async def started() -> bool:
                detail = (await s.client.get(f"/api/runs/{run_id}")).json()
                return bool(detail["running"] == ["wait"])

            await wait_until(started, 30)
            await page.goto(f"{s.url}/runs/{run_id}")
            await expect(page.locator("#run-head")).to_contain_text(f"owner {worker.worker_id}")
            await expect(page.locator("#run-head")).to_contain_text("at node wait")
            await expect(page.locator("#interrupted")).to_have_count(0)
        # The worker closed: it handed the run back, recording nothing.
        detail = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert (detail["summary"]["status"], detail["summary"]["ownership"]) == (
            "running",
            "waiting",
        )
        await page.goto(f"{s.url}/runs/{run_id}")
        interrupted = page.locator("#interrupted")
        await expect(interrupted).to_have_text("interrupted: wait (waiting for a worker)")
        await expect(page.locator("#run-head")).not_to_contain_text("at node")

        cancelled = await s.client.post(f"/api/runs/{run_id}/cancel", json={}, headers=AUTH)
        assert cancelled.status_code == 202, cancelled.text
        # The live event redraws the page.
        await expect(interrupted).to_have_text("interrupted: wait (the run was cancelled)")
        await expect(page.locator("#run-head .badge.s-cancelled")).to_be_visible()
        await expect(page.locator("#run-head")).not_to_contain_text("at node")


async def test_an_approval_card_shows_the_texts_its_listing_row_shortened_whole(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    description = "Check the refund against the ledger. " * 40  # 1,480 characters
    gated = GraphSpec(
        id="gated",
        nodes=[
            NodeSpec(id="step", kind="function", function="step"),
            NodeSpec(  # paused before it asks the model anything
                id="gate",
                kind="llm",
                input_keys=["ok"],
                output_keys=["answer"],
                description=description,
                success_criteria=["x" * 600],
            ),
        ],
        edges=[EdgeSpec(source="step", target="gate")],
        entry_node="step",
        pause_nodes=["gate"],
    )
    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        handle = await s.runtime.start(gated, input={"ok": "draft"})
        assert (await handle.result()).status == "paused"
        (row,) = (await s.client.get("/api/runs")).json()["runs"]
        assert row["paused"]["shortened"] == ["description", "success_criteria"]

        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        card = page.locator(f'#approvals .card[data-run="{handle.run_id}"]')
        # The card reads the run's detail for them: the approver sees them whole.
        await expect(card.locator(".gate p").first).to_have_text(description.strip())
        await expect(card.locator(".criteria li")).to_have_text(["x" * 600])
        await expect(card.locator('textarea[data-key="ok"]')).to_have_value("draft")
