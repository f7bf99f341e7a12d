"""The dashboard at its edges, in a real headless Chromium: a refusal stays on the page with
the server's reason, the approvals page keeps what was typed while other runs change, node
ids and memory keys named like JavaScript's object members, and values that a JS number or
an unquoted field would change (long integers, floats, strings that read as JSON) go through
the approval form exactly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.server import create_app

from .support import AUTH, FUNCTIONS, TOKEN, Served, live_server, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

#: A graph whose node ids and gated keys are names every JavaScript object inherits.
MEMBERS = GraphSpec(
    id="members",
    nodes=[
        NodeSpec(id="constructor", kind="function", function="step"),
        NodeSpec(
            id="toString",
            kind="function",
            function="step",
            input_keys=["__proto__", "hasOwnProperty", "n", "big"],
        ),
    ],
    edges=[EdgeSpec(source="constructor", target="toString")],
    entry_node="constructor",
    pause_nodes=["toString"],
)
LONG = 12345678901234567891  # past 2**53: a JS number would round it


@asynccontextmanager
async def members_served(path: Path) -> AsyncIterator[Served]:
    async with Runtime(path, functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[MEMBERS], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            yield Served(url, rt, c)


async def _start(s: Served, graph: str, input: dict[str, Any] | None = None) -> str:
    started = await s.client.post(
        "/api/runs", json={"graph": graph, "input": input or {}}, headers=AUTH
    )
    assert started.status_code == 201, started.text
    run_id: str = started.json()["run_id"]
    await s.wait_status(run_id, "paused")
    return run_id


async def _approvals(s: Served, run_id: str) -> list[dict[str, Any]]:
    page = (await s.client.get(f"/api/runs/{run_id}/events", params={"type": "approval."})).json()
    return [e["body"] for e in page["events"]]


async def test_a_refused_action_stays_on_the_page_with_the_servers_reason(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id = await _start(s, "quick")
        rejected = await s.client.post(
            f"/api/runs/{run_id}/reject", json={"by": "ann"}, headers=AUTH
        )
        assert rejected.status_code == 202
        await s.wait_status(run_id, "cancelled")
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        # A cancelled run offers Resume; a rejection is final, and the server says so.
        await page.locator("#actions button", has_text="Resume").click()
        refused = page.locator("#recorded .refused")
        await expect(refused).to_contain_text("Resume refused")
        await expect(refused).to_contain_text("was rejected (final)")
        # The card is drawn again after the click; the reason is still there.
        await expect(page.locator("#actions button", has_text="Resume")).to_be_visible()
        await expect(refused).to_have_count(1)


async def test_the_approvals_page_keeps_what_was_typed_while_other_runs_change(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        first = await _start(s, "quick", {"ok": "as recorded"})
        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        card = page.locator(f'#approvals .card[data-run="{first}"]')
        await card.locator("input.by").fill("carol")
        await card.locator('textarea[data-key="ok"]').fill("half typed")
        # Another run starts and pauses: the list reloads (its card appears).
        second = await _start(s, "quick")
        await expect(page.locator(f'#approvals .card[data-run="{second}"]')).to_be_visible()
        await expect(card.locator("input.by")).to_have_value("carol")
        await expect(card.locator('textarea[data-key="ok"]')).to_have_value("half typed")
        await card.locator("text=Approve and resume").click()
        await expect(page.locator("#recorded")).to_contain_text(f"{first}: Approved by carol")
        assert await _approvals(s, first) == [
            {"node_id": "gate", "by": "carol", "input": {"ok": "half typed"}}
        ]


async def test_node_ids_and_keys_named_like_object_members_are_drawn_and_approved(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with members_served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id = await _start(s, "members", {"n": 1, "big": 2})
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        graph = page.locator("svg.graph")
        await expect(graph.locator('g[data-node="toString"]')).to_be_visible()
        assert "NaN" not in (await graph.get_attribute("viewBox") or "")
        for node in ("constructor", "toString"):
            where = await graph.locator(f'g[data-node="{node}"]').get_attribute("transform")
            assert where is not None and "NaN" not in where, (node, where)
        # One visit of constructor; none of toString (the run waits before it).
        assert await graph.locator(".count").all_text_contents() == ["\u00d71"]
        form = page.locator("form.approve")
        await expect(form.locator(".waiting")).to_have_text(
            "waiting for: __proto__, hasOwnProperty"
        )
        await form.locator('textarea[data-key="__proto__"]').fill('"p"')
        await form.locator('textarea[data-key="hasOwnProperty"]').fill("false")
        await form.locator("input.by").fill("dan")
        await form.locator("text=Approve and resume").click()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        assert await _approvals(s, run_id) == [
            {
                "node_id": "toString",
                "by": "dan",
                "input": {"__proto__": "p", "hasOwnProperty": False},
            }
        ]


async def test_values_go_through_the_approval_form_exactly(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with members_served(tmp_path / "runs.db") as s, browser_page() as page:
        memory = {"__proto__": 0, "hasOwnProperty": 0, "n": "42", "big": {"id": LONG, "ok": False}}
        run_id = await _start(s, "members", memory)
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        form = page.locator("form.approve")
        # A string that reads as JSON is shown quoted; a long integer with every digit.
        await expect(form.locator('textarea[data-key="n"]')).to_have_value('"42"')
        big = form.locator('textarea[data-key="big"]')
        await expect(big).to_have_value(f'{{"id":{LONG},"ok":false}}')
        await big.fill(f'{{"id": {LONG}, "ok": true}}')
        await form.locator('textarea[data-key="n"]').fill('"43"')
        await form.locator("button", has_text="+ key").click()
        await form.locator(".pair input.key").last.fill("ratio")
        await form.locator(".pair textarea.value").last.fill("1.0")
        await form.locator("input.by").fill("eve")
        await form.locator("text=Approve and resume").click()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        (approval,) = await _approvals(s, run_id)
        assert approval["input"] == {"n": "43", "big": {"id": LONG, "ok": True}, "ratio": 1.0}
        assert isinstance(approval["input"]["ratio"], float)
        # The timeline shows the input as recorded, every digit of it.
        started = page.locator('#timeline tr[data-type="run.started"]')
        await expect(started).to_contain_text(str(LONG))
