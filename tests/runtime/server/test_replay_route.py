"""``POST /api/runs/{run}/replay`` over real HTTP: the report as the library gives it,
against the recorded graph or a registered one; the token, unknown runs and graphs, and a
log that fails verification."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import AUTH, draft_script, forge_a_verdict, served

pytestmark = pytest.mark.anyio


async def _reviewed_run(s: object) -> str:
    client = s.client  # type: ignore[attr-defined]
    started = await client.post("/api/runs", json={"graph": "reviewed"}, headers=AUTH)
    run_id: str = started.json()["run_id"]
    await s.wait_status(run_id, "paused")  # type: ignore[attr-defined]
    approve = await client.post(
        f"/api/runs/{run_id}/approve",
        json={"by": "ann", "input": {"approved": True, "note": "ok"}},
        headers=AUTH,
    )
    assert approve.status_code == 202, approve.text
    done = await s.wait_status(run_id, "completed", "failed")  # type: ignore[attr-defined]
    assert done["summary"]["status"] == "completed"
    return run_id


async def test_replay_answers_the_report(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _reviewed_run(s)
        answer = await s.client.post(f"/api/runs/{run_id}/replay", json={}, headers=AUTH)
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["equal"] is True and report["divergences"] == []
        assert report["model_calls"] == 6  # four turns and two Level 2 answers, from the log
        other = await s.client.post(
            f"/api/runs/{run_id}/replay", json={"graph": "quick"}, headers=AUTH
        )
        assert other.status_code == 200, other.text
        first = other.json()["divergences"][0]
        assert other.json()["equal"] is False
        assert (first["seq"], first["kind"]) == (2, "node.started")
        assert first["reason"] == "node `draft` is no longer in the graph"


async def test_replay_refusals(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _reviewed_run(s)
        post = s.client.post
        assert (await post(f"/api/runs/{run_id}/replay", json={})).status_code == 401
        unknown = await post(f"/api/runs/{run_id}/replay", json={"graph": "nope"}, headers=AUTH)
        assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_graph"
        ghost = await post("/api/runs/ghost/replay", json={}, headers=AUTH)
        assert ghost.status_code == 404 and ghost.json()["error"] == "run_not_found"
        typo = await post(f"/api/runs/{run_id}/replay", json={"grpah": "x"}, headers=AUTH)
        assert typo.status_code == 422
        seq = forge_a_verdict(tmp_path / "runs.db", run_id)
        forged = await post(f"/api/runs/{run_id}/replay", json={}, headers=AUTH)
        assert forged.status_code == 409 and forged.json()["error"] == "corrupt_log"
        assert f"seq {seq}" in forged.json()["detail"]


async def test_replay_can_rejudge_with_the_servers_model(tmp_path: Path) -> None:
    # The server's model: two runs' worth of script; the second run's judge answers are
    # what a rejudge of the first run is told (the first run used the first two).
    async with served(tmp_path / "runs.db", provider=draft_script(runs=2)) as s:
        run_id = await _reviewed_run(s)
        answer = await s.client.post(
            f"/api/runs/{run_id}/replay", json={"rejudge": True}, headers=AUTH
        )
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["live_calls"] == 2 and report["equal"] is True
