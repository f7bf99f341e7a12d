"""HTTP reads of an edited run answer 200 with the broken chain named; a fork of it is
refused with 409 and writes nothing; an approval names who approved it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from .support import AUTH, served

pytestmark = pytest.mark.anyio


async def _paused(s: Any) -> str:
    response = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    await s.wait_status(run_id, "paused")
    return run_id


def _edit_first_event(path: Path, run_id: str) -> None:
    db = sqlite3.connect(path)
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        pos, body = db.execute(
            "SELECT position, body FROM events WHERE run = ? AND seq = 1", (key,)
        ).fetchone()
        edited = bytes(body).replace(b'"quick"', b'"quack"')
        assert edited != bytes(body)
        db.execute("UPDATE events SET body = ? WHERE position = ?", (edited, pos))
    db.close()


async def test_reads_of_an_edited_run_answer_200_with_the_chain_broken(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _paused(s)
        url = f"/api/runs/{run_id}"
        intact = (await s.client.get(url)).json()
        assert intact["chain"]["ok"] is True and intact["chain"]["scope"] == "full"
        state = (await s.client.get(f"{url}/state")).json()
        assert state["chain"] == intact["chain"] and state["status"] == "paused"

        _edit_first_event(tmp_path / "runs.db", run_id)

        detail = await s.client.get(url)
        assert detail.status_code == 200
        chain = detail.json()["chain"]
        assert (chain["ok"], chain["broken_at"]) == (False, 1) and "hash" in chain["reason"]
        state = await s.client.get(f"{url}/state")
        assert state.status_code == 200 and state.json()["chain"] == chain
        page = (await s.client.get(f"{url}/events")).json()
        assert page["chain"]["ok"] is False and page["chain"]["broken_at"] == 1
        assert [e["seq"] for e in page["events"]][:2] == [1, 2]
        assert page["events"][0]["body"]["graph"]["id"] == "quack"  # what the log holds

        listed = (await s.client.get("/api/runs")).json()["runs"]
        fork = await s.client.post(f"{url}/fork", json={"at_seq": 2}, headers=AUTH)
        assert fork.status_code == 409, fork.text
        assert fork.json()["error"] == "corrupt_log"
        assert (await s.client.get("/api/runs")).json()["runs"] == listed


async def test_a_fork_is_shown_as_one_and_an_approval_names_who_approved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _paused(s)
        fork = await s.client.post(f"/api/runs/{run_id}/fork", json={"at_seq": 2}, headers=AUTH)
        assert fork.status_code == 201, fork.text
        forked = fork.json()["run_id"]
        detail = await s.wait_status(forked, "paused")
        origin = detail["summary"]["forked_from"]
        assert origin["run_id"] == run_id and origin["seq"] == 2 and len(origin["hash"]) == 64

        with caplog.at_level("INFO", logger="magistrate.runs"):
            approved = await s.client.post(
                f"/api/runs/{run_id}/approve", json={"input": {"ok": 1}, "by": "ann"}, headers=AUTH
            )
            assert approved.status_code == 202, approved.text
            await s.wait_status(run_id, "completed")
        assert f"run {run_id}: approved by ann" in caplog.text
