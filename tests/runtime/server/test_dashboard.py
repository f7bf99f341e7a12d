"""The dashboard in a real headless Chromium (Debian's chromium, driven by playwright)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from .support import AUTH, TOKEN, VAGUE, forge_a_verdict, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

CHROMIUM = os.environ.get("MAGISTRATE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _need_browser() -> None:
    if not Path(CHROMIUM).exists():
        print(f"chromium not found at {CHROMIUM}: apt-get install chromium (.ci/run does)")
        pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        print("playwright is not installed (pip install -e '.[dev]')")
        pytest.skip("playwright is not installed")


@asynccontextmanager
async def browser_page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            await browser.close()


async def _paused_review(s: Any) -> tuple[str, list[dict[str, Any]]]:
    """A "reviewed" run paused at its review, and its events (as the API gives them)."""
    started = await s.client.post(
        "/api/runs", json={"graph": "reviewed", "input": {"topic": "Lisbon"}}, headers=AUTH
    )
    run_id = started.json()["run_id"]
    await s.wait_status(run_id, "paused")
    events = (await s.client.get(f"/api/runs/{run_id}/events")).json()["events"]
    return run_id, events


async def test_approve_a_paused_run_in_the_browser_and_watch_it_finish_live(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post(
            "/api/runs", json={"graph": "reviewed", "input": {"topic": "Lisbon"}}, headers=AUTH
        )
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        other = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        await s.wait_status(other.json()["run_id"], "paused")

        # The runs page, with the token handed over in the address's fragment.
        await page.goto(f"{s.url}/?status=paused#token={TOKEN}")
        rows = page.locator("#runs tbody tr")
        await expect(rows).to_have_count(2)
        await expect(page.locator(f'tr[data-run="{run_id}"]')).to_contain_text("review (hitl)")
        assert "token" not in page.url  # the fragment is taken out of the address
        # Filters live in the URL: a reload keeps them.
        await page.select_option("select[name=quality]", "clean")
        await page.click("#filters button[type=submit]")
        await expect(page.locator("#runs tbody")).to_contain_text("No runs match")
        assert "quality=clean" in page.url and "status=paused" in page.url
        await page.reload()
        assert await page.locator("select[name=quality]").input_value() == "clean"
        await page.goto(f"{s.url}/?status=paused")

        # Open the paused run.
        await page.click(f'a[href="/runs/{run_id}"]')
        await expect(page.locator("#run-head")).to_contain_text("paused")
        await expect(page.locator("#current")).to_have_text("review")
        strip = page.locator('#verdicts .strip-block[data-node="draft"]')
        await expect(strip.locator(".verdict")).to_have_count(4)
        await expect(strip.locator(".verdict").last).to_have_attribute("data-action", "ACCEPT")
        # The two set_output turns are tool turns, not judged RETRYs.
        assert await strip.locator('.verdict[data-action="RETRY"]').count() == 1
        assert await strip.locator('.verdict[data-action="TOOL"]').count() == 2
        await expect(strip.locator(".feedback").first).to_contain_text(VAGUE)
        await expect(page.locator('#graph g.node.current[data-node="review"]')).to_have_count(1)
        await expect(page.locator('#graph g.node[data-node="draft"] .count')).to_have_text(
            "\u00d71"
        )

        # Approve with typed input and watch the run finish without reloading.
        await page.fill('textarea[data-key="approved"]', "true")
        await page.fill('textarea[data-key="note"]', "ok by Ana")
        await page.fill("input.by", "ana")
        await page.click("text=Approve and resume")
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        await expect(page.locator("#memory")).to_contain_text("PUBLISHED: TP 1234 LIS-JFK")
        await expect(page.locator("#timeline")).to_contain_text("run.finished")
        detail = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert detail["memory"]["approved"] is True
        assert detail["memory"]["reviewed_by"] == "ok by Ana"
        last = detail["summary"]["last_seq"]
        await expect(page.locator("#chain")).to_have_text(f"verified: {last:,} events intact")
        # One page, never reloaded: every event once, in order.
        seqs = [
            int(x)
            for x in await page.locator("#timeline tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.seq)"
            )
        ]
        assert seqs == list(range(1, last + 1))


async def test_time_travel_and_the_timeline_filters(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id, events = await _paused_review(s)
        first_output = next(e["seq"] for e in events if e["type"] == "output.set")

        await page.goto(f"{s.url}/runs/{run_id}#token={TOKEN}")
        await expect(page.locator("#timeline tbody tr")).to_have_count(len(events))
        # Only verdicts.
        for label in ("turns", "tool calls", "memory writes", "edges", "pauses", "nodes", "run"):
            await page.uncheck(f'input[data-category="{label}"]')
        await expect(page.locator("#timeline tbody tr")).to_have_count(
            sum(e["type"] in ("judge.verdict", "node.stalled") for e in events)
        )
        types = await page.locator("#timeline tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.type)"
        )
        assert set(types) == {"judge.verdict"}
        await page.check('input[data-category="memory writes"]')
        await page.click(f'#timeline tr[data-seq="{first_output}"]')
        await expect(page.locator("#travel")).to_contain_text(f"State after seq {first_output}")
        await expect(page.locator("#travel")).to_contain_text("fly somewhere")
        await expect(page.locator("#state-memory")).to_contain_text("Lisbon")

        # Fork from the pause with edited input: the fork waits at the gate, its form
        # prefilled with the fork's memory; approving it runs it on to completion.
        paused_seq = events[-1]["seq"]
        assert events[-1]["type"] == "run.paused"
        await page.check('input[data-category="pauses"]')
        await page.click(f'#timeline tr[data-seq="{paused_seq}"]')
        await expect(page.locator("#travel")).to_contain_text(f"State after seq {paused_seq}")
        await page.fill(
            "#fork-input", '{"topic": "Porto", "approved": true, "note": "forked by Rui"}'
        )
        await page.click("#fork")
        link = page.locator("#travel a")
        await expect(link).to_have_count(1)
        fork_id = await link.text_content()
        assert fork_id and fork_id != run_id
        await link.click()
        form = page.locator("form.approve")
        await expect(form.locator('textarea[data-key="note"]')).to_have_value("forked by Rui")
        await form.locator("input.by").fill("rui")
        await form.locator("text=Approve and resume").click()
        await expect(page.locator("#run-head .badge.s-completed")).to_be_visible()
        forked = (await s.client.get(f"/api/runs/{fork_id}")).json()
        assert forked["memory"]["topic"] == "Porto"
        assert forked["memory"]["reviewed_by"] == "forked by Rui"
        source = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert source["summary"]["status"] == "paused"

        # An edited log shows where its chain breaks.
        seq = forge_a_verdict(tmp_path / "runs.db", run_id)
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator("#chain")).to_contain_text(f"chain broken at seq {seq}")
        await expect(page.locator("#chain")).to_have_class("chain-bad")


async def test_screenshots_of_the_runs_page_and_a_run_page(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        ids = []
        for graph in ("reviewed", "quick", "quick"):
            response = await s.client.post("/api/runs", json={"graph": graph}, headers=AUTH)
            ids.append(response.json()["run_id"])
            await s.wait_status(ids[-1], "paused")
        approve = {"input": {"ok": 1}, "by": "ann"}
        await s.client.post(f"/api/runs/{ids[1]}/approve", json=approve, headers=AUTH)
        await s.wait_status(ids[1], "completed")
        # Every request the pages make is answered (no 404 for a favicon, ...), and the
        # browser's console reports no error.
        failed: list[str] = []
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        page.on("console", lambda m: failed.append(m.text) if m.type == "error" else None)
        await page.goto(f"{s.url}/")
        await expect(page.locator("#runs tbody tr")).to_have_count(3)
        runs_png = tmp_path / "runs.png"
        await page.screenshot(path=str(runs_png), full_page=True)
        await page.goto(f"{s.url}/runs/{ids[0]}")
        await expect(page.locator("#chain")).to_contain_text("verified")
        await page.click("#timeline tbody tr:nth-child(6)")
        await expect(page.locator("#state-memory")).to_be_visible()
        run_png = tmp_path / "run.png"
        await page.screenshot(path=str(run_png), full_page=True)
        await page.goto(f"{s.url}/approvals")
        await expect(page.locator("#approvals .card")).to_have_count(2)
        await page.screenshot(path=str(tmp_path / "approvals.png"), full_page=True)
        assert failed == []
        for png in (runs_png, run_png):
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert png.stat().st_size > 10_000
        print(f"screenshots in {tmp_path}")


async def test_a_long_run_pages_its_timeline_as_it_scrolls(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        started = await s.client.post("/api/runs", json={"graph": "loop"}, headers=AUTH)
        run_id = started.json()["run_id"]
        detail = await s.wait_status(run_id, "completed", "failed")
        assert detail["summary"]["status"] == "completed"
        last = detail["summary"]["last_seq"]
        assert last > 1000
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator("#chain")).to_have_text(f"verified: {last:,} events intact")
        await expect(page.locator('#graph g.node[data-node="tick"] .count')).to_have_text(
            "\u00d7400"
        )
        rows = page.locator("#timeline tbody tr")
        await expect(rows).to_have_count(200)  # one page; the rest comes as it scrolls
        while await rows.count() < last:
            before = await rows.count()
            await page.locator("#timeline").evaluate("el => { el.scrollTop = el.scrollHeight; }")
            await expect(rows).not_to_have_count(before)
        seqs = await rows.evaluate_all("rows => rows.map(r => Number(r.dataset.seq))")
        assert seqs == list(range(1, last + 1))


async def test_the_runs_table_filters_and_pages_with_a_cursor_kept_in_the_url(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    from eventstore import EventBody
    from runtime.events import RunFinished, RunStarted

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        store = s.runtime.store
        assert store is not None
        for i in range(30):  # r00 oldest ... r29 newest; trip runs are even, 4 in 5 clean
            graph = ("trip", "mail")[i % 2]
            events: list[EventBody] = [RunStarted(graph={"id": graph}, graph_hash="h", entry="a")]
            quality = "degraded" if i % 5 == 0 else "clean"
            events.append(RunFinished(status="completed", quality=quality))
            await store.append(f"r{i:02d}", events, expected_seq=0)
        trip_clean = [f"r{i:02d}" for i in range(29, -1, -1) if i % 2 == 0 and i % 5]

        async def shown() -> list[str]:
            rows = page.locator("#runs tbody tr[data-run]")
            return [str(x) for x in await rows.evaluate_all("rs => rs.map(r => r.dataset.run)")]

        await page.goto(f"{s.url}/")
        await page.fill("input[name=graph]", "trip")
        await page.select_option("select[name=quality]", "clean")
        await page.select_option("select[name=limit]", "10")
        await page.click("#filters button[type=submit]")
        rows = page.locator("#runs tbody tr[data-run]")
        await expect(rows.first).to_have_attribute("data-run", trip_clean[0])
        await expect(rows).to_have_count(10)
        assert await shown() == trip_clean[:10]
        for part in ("graph=trip", "quality=clean", "limit=10"):
            assert part in page.url
        await expect(page.locator("#newer")).to_have_count(0)

        # The next page follows the cursor; its URL reloads it, filters and all.
        await page.click("#older")
        await expect(rows.first).to_have_attribute("data-run", trip_clean[10])
        assert await shown() == trip_clean[10:]
        assert "cursor=" in page.url and "graph=trip" in page.url
        await expect(page.locator("#older")).to_have_count(0)  # the last page
        await page.reload()
        await expect(rows.first).to_have_attribute("data-run", trip_clean[10])
        assert await shown() == trip_clean[10:]
        assert await page.locator("input[name=graph]").input_value() == "trip"

        # Back to the newer page, then a new filter starts again at the newest runs.
        await page.click("#newer")
        await expect(rows.first).to_have_attribute("data-run", trip_clean[0])
        assert await shown() == trip_clean[:10]
        await page.select_option("select[name=quality]", "degraded")
        await page.click("#filters button[type=submit]")
        await expect(rows.first).to_have_attribute("data-run", "r20")
        assert await shown() == ["r20", "r10", "r00"]
        assert "cursor=" not in page.url and "quality=degraded" in page.url


async def test_an_answer_a_later_pick_superseded_does_not_overwrite_it(tmp_path: Path) -> None:
    """Answers can arrive out of order: the state of the event picked last stays shown."""
    _need_browser()
    import asyncio

    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        run_id, events = await _paused_review(s)
        last = events[-1]["seq"]

        # The browser holds back the answer for the first event until told to let it go.
        release = asyncio.Event()

        async def hold(route: Any) -> None:
            await release.wait()
            await route.continue_()

        await page.route(lambda url: url.endswith("/state?at=1"), hold)
        await page.goto(f"{s.url}/runs/{run_id}")
        await expect(page.locator("#timeline tbody tr")).to_have_count(len(events))
        await page.click('#timeline tr[data-seq="1"]')
        await page.click(f'#timeline tr[data-seq="{last}"]')
        await expect(page.locator("#travel h2").first).to_contain_text(f"State after seq {last}")
        async with page.expect_event("requestfinished", lambda r: r.url.endswith("at=1")):
            release.set()
        # Let the page handle the late answer (a task after its body arrived), then look.
        await page.evaluate("() => new Promise((done) => setTimeout(done, 100))")
        await expect(page.locator("#travel h2").first).to_contain_text(f"State after seq {last}")
        assert await page.locator("#timeline tr.selected").get_attribute("data-seq") == str(last)


async def test_the_approvals_page_pages_through_many_paused_runs(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    from eventstore import EventBody
    from runtime.events import RunPaused, RunStarted

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        store = s.runtime.store
        assert store is not None
        for i in range(60):  # p00 oldest ... p59 newest
            events: list[EventBody] = [RunStarted(graph={"id": "g"}, graph_hash="h", entry="a")]
            events.append(RunPaused(reason="hitl", node_id="a"))
            await store.append(f"p{i:02d}", events, expected_seq=0)
        newest_first = [f"p{i:02d}" for i in range(59, -1, -1)]
        cards = page.locator("#approvals .card")

        async def shown() -> list[str]:
            return [str(x) for x in await cards.evaluate_all("cs => cs.map(c => c.dataset.run)")]

        await page.goto(f"{s.url}/approvals")
        await expect(cards).to_have_count(50)
        assert await shown() == newest_first[:50]
        await expect(page.locator("#approvals-newer")).to_have_count(0)
        await page.click("#approvals-older")
        await expect(cards).to_have_count(10)
        assert await shown() == newest_first[50:]
        await expect(page.locator("#approvals-older")).to_have_count(0)
        await expect(cards.first).to_contain_text("Paused (hitl) before node a")
        await page.click("#approvals-newer")
        await expect(cards).to_have_count(50)
        assert await shown() == newest_first[:50]


async def test_the_runs_table_shows_the_worker_holding_a_run_or_that_it_waits_for_one(
    tmp_path: Path,
) -> None:
    _need_browser()
    from playwright.async_api import expect

    from .support import GATE, HELD

    GATE.clear()
    try:
        async with served(tmp_path / "runs.db") as s, browser_page() as page:
            started = await s.client.post("/api/runs", json={"graph": "held"}, headers=AUTH)
            live = started.json()["run_id"]
            await s.wait_status(live, "running")
            submitted = await s.runtime.submit(HELD, input={})

            await page.goto(f"{s.url}/")

            def owner_of(run_id: str) -> Any:
                return page.locator(f'#runs tr[data-run="{run_id}"] td.owner')

            await expect(owner_of(live)).to_have_text(s.runtime.worker_id)
            await expect(owner_of(live)).to_have_attribute("data-ownership", "claimed")
            await expect(owner_of(submitted)).to_have_text("waiting for a worker")
            await expect(owner_of(submitted)).to_have_attribute("data-ownership", "waiting")
            # The status column stays the log's: both are running.
            for run_id in (live, submitted):
                status = page.locator(f'#runs tr[data-run="{run_id}"] .badge.s-running')
                await expect(status).to_have_text("running")

            await page.goto(f"{s.url}/runs/{submitted}")
            await expect(page.locator("#owner")).to_have_text("waiting for a worker")
            await page.goto(f"{s.url}/runs/{live}")
            await expect(page.locator("#owner")).to_have_text(f"owner {s.runtime.worker_id}")
            GATE.set()
            await s.wait_status(live, "completed")
    finally:
        GATE.set()


async def test_a_fork_s_run_page_says_what_it_was_forked_from(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    async with served(tmp_path / "runs.db") as s, browser_page() as page:
        response = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        source = response.json()["run_id"]
        await s.wait_status(source, "paused")
        fork = await s.client.post(f"/api/runs/{source}/fork", json={"at_seq": 2}, headers=AUTH)
        forked = fork.json()["run_id"]
        await s.wait_status(forked, "paused")
        await page.goto(f"{s.url}/")
        await expect(page.locator(f'#runs tr[data-run="{forked}"] .fork')).to_have_text(
            f" fork of {source}"
        )
        await expect(page.locator(f'#runs tr[data-run="{source}"] .fork')).to_have_count(0)
        await page.goto(f"{s.url}/runs/{forked}")
        await expect(page.locator("#forked")).to_have_text(f"fork of {source} at seq 2")
        await page.click("#forked a")
        await expect(page).to_have_url(f"{s.url}/runs/{source}")
        await expect(page.locator("#forked")).to_have_count(0)
        await expect(page.locator("#chain")).to_contain_text("verified")
