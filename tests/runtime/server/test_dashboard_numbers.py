"""Numbers in a real headless Chromium are shown as the log holds them: a float 1.0 as
``1.0`` (not ``1``) and an integer past 2^53 with every digit, in the approval form,
the timeline, an event, memory, node outputs and verdicts; and the approvals page stays
light beside a run holding a 1 MB value, whose card is still prefilled with all of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec
from runtime.testing import ScriptedProvider, reply, tool_call

from .support import FUNCTIONS, QUICK, TOKEN, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

LONG = 2**60 + 1  # past 2**53: a JS number would round it


def floats(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"ratio": 1.0, "big": LONG, "nested": {"x": 3.0, "n": 3}}


FUNCTIONS["floats"] = floats

FLOATS = GraphSpec(
    id="floats",
    nodes=[
        NodeSpec(id="make", kind="function", function="floats"),
        NodeSpec(
            id="gate", kind="function", function="step", input_keys=["ratio", "big", "nested"]
        ),
    ],
    edges=[EdgeSpec(source="make", target="gate")],
    entry_node="make",
    pause_nodes=["gate"],
)

#: One LLM node, judged ACCEPT with confidence 1.0.
SURE = GraphSpec(
    id="sure",
    nodes=[
        NodeSpec(
            id="say",
            kind="llm",
            description="Say it.",
            output_keys=["said"],
            success_criteria=["Says one."],
        )
    ],
    edges=[],
    entry_node="say",
)


async def test_a_float_shows_as_a_float_across_the_run_page(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id = (await s.runtime.start(FLOATS, input={"given": 2.0})).run_id
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")

        form = page.locator("form.approve")
        await expect(form.locator('textarea[data-key="ratio"]')).to_have_value("1.0")
        await expect(form.locator('textarea[data-key="big"]')).to_have_value(str(LONG))
        await expect(form.locator('textarea[data-key="nested"]')).to_have_value('{"x":3.0,"n":3}')
        started = page.locator('#timeline tr[data-type="run.started"]')
        await expect(started).to_contain_text('{"given":2.0}')

        # The state after the last event: the event whole, memory and node outputs.
        await page.locator("#timeline tbody tr").last.click()
        memory = page.locator("#state-memory")
        await expect(memory).to_contain_text('"ratio": 1.0')
        await expect(memory).to_contain_text('"given": 2.0')
        await expect(memory).to_contain_text(f'"big": {LONG}')
        await expect(memory).to_contain_text('"x": 3.0')
        outputs = page.locator("#travel pre").last
        await expect(outputs).to_contain_text('"ratio": 1.0')
        await started.click()
        await expect(page.locator("#event-body")).to_contain_text('"given": 2.0')

        # Approving with the fields as shown changes nothing in memory.
        await form.locator("input.by").fill("ana")
        await form.locator("text=Approve and resume").click()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        await expect(page.locator("#memory")).to_contain_text('"ratio": 1.0')
        events = (await s.client.get(f"/api/runs/{run_id}/events?type=approval.")).json()
        assert [e["body"]["input"] for e in events["events"]] == [{}]
        done = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert done["memory"]["ratio"] == 1.0 and isinstance(done["memory"]["ratio"], float)


async def test_a_confidence_of_one_shows_as_a_float_in_the_verdicts(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    provider = ScriptedProvider(
        [reply("", tool_call("set_output", key="said", value=1.0)), reply("Done.")],
        judge=['{"verdict": "ACCEPT", "confidence": 1.0, "feedback": "Sure."}'],
    )
    async with served(tmp_path / "runs.db", provider=provider) as s, browser_page() as page:
        run_id = (await s.runtime.start(SURE)).run_id
        done = await s.wait_status(run_id, "completed", "failed")
        assert done["summary"]["status"] == "completed"
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        accept = page.locator('#verdicts .verdict[data-action="ACCEPT"]')
        await expect(accept).to_contain_text("ACCEPT quality 1.0 #")
        verdict = page.locator('#timeline tr[data-type="judge.verdict"]').last
        await expect(verdict).to_contain_text("ACCEPT (quality, 1.0)")
        written = page.locator('#timeline tr[data-type="output.set"]')
        await expect(written).to_contain_text("said = 1.0")


async def test_the_approvals_page_stays_light_and_prefills_a_megabyte_from_the_run(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    mega = "m" * 1_000_000
    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        big = (await s.runtime.start(QUICK, input={"ok": mega})).run_id
        small = (await s.runtime.start(QUICK, input={"ok": 1.0})).run_id
        for run_id in (big, small):
            await s.wait_status(run_id, "paused")
        listings: list[int] = []

        async def measure(response: Any) -> None:
            if "/api/runs?" in response.url:
                listings.append(len(await response.body()))

        page.on("response", measure)
        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        small_field = page.locator(f'.card[data-run="{small}"] textarea[data-key="ok"]')
        await expect(small_field).to_have_value("1.0")
        big_field = page.locator(f'.card[data-run="{big}"] textarea[data-key="ok"]')
        await expect(big_field).to_have_count(1)
        assert await big_field.evaluate("(el) => el.value.length") == len(mega)
        assert await big_field.evaluate("(el) => el.value === 'm'.repeat(1000000)")
        assert listings and max(listings) < 10_000, listings
