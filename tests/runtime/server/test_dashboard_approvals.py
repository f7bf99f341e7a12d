"""The dashboard's approval form in a real headless Chromium: it shows what the gated node
reads, prefilled from memory, sends only what the approver changed (an untouched field
never overwrites memory), names who approved, can reject, and confirms what the server
recorded; "waiting for" lists only the keys memory lacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .support import AUTH, TOKEN, served
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def _events(s: Any, run_id: str, tag: str) -> list[dict[str, Any]]:
    page = (await s.client.get(f"/api/runs/{run_id}/events", params={"type": tag})).json()
    return [e["body"] for e in page["events"]]


async def test_an_untouched_field_keeps_memory_and_the_card_confirms_the_approval(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post(
            "/api/runs", json={"graph": "quick", "input": {"ok": "the draft"}}, headers=AUTH
        )
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        card = page.locator(f'#approvals .card[data-run="{run_id}"]')
        field = card.locator('textarea[data-key="ok"]')
        await expect(field).to_have_value("the draft")  # prefilled from memory
        await expect(card.locator(".waiting")).to_have_text("the node has all it reads")
        await card.locator("input.by").fill("bob")
        await card.locator("text=Approve and resume").click()
        await expect(page.locator("#recorded")).to_contain_text(
            f"{run_id}: Approved by bob with no change to memory"
        )
        done = await s.wait_status(run_id, "completed", "failed")
        assert done["memory"]["ok"] == "the draft"  # not overwritten with ''
        assert await _events(s, run_id, "approval.") == [
            {"node_id": "gate", "by": "bob", "input": {}}
        ]


async def test_a_changed_field_is_sent_and_waiting_for_names_only_missing_keys(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post(
            "/api/runs",
            json={"graph": "reviewed", "input": {"topic": "Lisbon", "note": "n1"}},
            headers=AUTH,
        )
        run_id = started.json()["run_id"]
        paused = await s.wait_status(run_id, "paused")
        assert paused["summary"]["paused"]["waiting_for"] == ["approved"]  # note is in memory
        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        form = page.locator("form.approve")
        await expect(form.locator(".waiting")).to_have_text("waiting for: approved")
        await expect(form.locator('textarea[data-key="note"]')).to_have_value("n1")
        # Approving without a name is refused in the page; nothing is sent.
        await form.locator("text=Approve and resume").click()
        await expect(form.locator(".error")).to_contain_text("say who you are")
        await form.locator('textarea[data-key="approved"]').fill("true")
        await form.locator("input.by").fill("ana")
        await form.locator("text=Approve and resume").click()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        assert await _events(s, run_id, "approval.") == [
            {"node_id": "review", "by": "ana", "input": {"approved": True}}
        ]
        detail = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert detail["memory"]["reviewed_by"] == "n1"


async def test_a_rejection_from_the_card_is_recorded_with_who_and_why(tmp_path: Path) -> None:
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post(
            "/api/runs", json={"graph": "quick", "input": {"ok": 1}}, headers=AUTH
        )
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        card = page.locator(f'#approvals .card[data-run="{run_id}"]')
        await card.locator("input.by").fill("carol")
        await card.locator("input.reason").fill("wrong amount")
        await card.locator("button.reject").click()
        await expect(page.locator("#recorded")).to_contain_text(f"{run_id}: Rejected by carol")
        done = await s.wait_status(run_id, "cancelled")
        assert done["summary"]["status"] == "cancelled"
        assert await _events(s, run_id, "approval.") == [
            {"node_id": "gate", "by": "carol", "reason": "wrong amount"}
        ]
        resumed = await s.client.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
        assert resumed.status_code == 409  # a rejection is final


async def test_the_approvals_page_reads_its_cards_from_the_listing_alone(tmp_path: Path) -> None:
    """A page of cards is one listing read: its pause views carry what each card shows
    (the values of the keys the gated node reads, its description and criteria), so no
    card asks for its run's detail."""
    need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        ids = []
        for n in range(3):
            started = await s.client.post(
                "/api/runs", json={"graph": "quick", "input": {"ok": f"draft {n}"}}, headers=AUTH
            )
            ids.append(started.json()["run_id"])
        for run_id in ids:
            await s.wait_status(run_id, "paused")
        listing = (await s.client.get("/api/runs", params={"status": "paused"})).json()
        views = {r["run_id"]: r["paused"] for r in listing["runs"]}
        assert views[ids[0]]["values"] == {"ok": "draft 0"}
        assert views[ids[0]]["reads"] == ["ok"] and views[ids[0]]["waiting_for"] == []
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        await page.goto(f"{s.url}/approvals#token={TOKEN}")
        for n, run_id in enumerate(ids):
            card = page.locator(f'#approvals .card[data-run="{run_id}"]')
            await expect(card.locator('textarea[data-key="ok"]')).to_have_value(f"draft {n}")
        api = [url.split("/api/", 1)[1] for url in asked if "/api/" in url]
        details = [path for path in api if path.startswith("runs/")]
        assert details == [], api
        assert sum(path.startswith("runs?") for path in api) >= 1
