"""The JSON API over real HTTP (uvicorn on a loopback port) against a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .support import AUTH, VAGUE, served

pytestmark = pytest.mark.anyio


async def _start(s: Any, graph: str, **body: Any) -> str:
    response = await s.client.post("/api/runs", json={"graph": graph, **body}, headers=AUTH)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


async def test_a_run_started_over_http_pauses_shows_its_verdicts_and_finishes_when_approved(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _start(s, "reviewed", input={"topic": "Lisbon"})
        detail = await s.wait_status(run_id, "paused")
        assert detail["summary"]["graph_id"] == "reviewed"
        assert detail["summary"]["paused"] == {
            "reason": "hitl",
            "node_id": "review",
            "waiting_for": ["approved", "note"],
            "reads": ["approved", "note"],
            "values": {},  # memory holds none of what it reads
            "description": "",
            "success_criteria": [],
            "values_omitted": [],
            "shortened": [],
        }
        assert detail["current"] == ["review"]
        assert detail["visit_counts"] == {"draft": 1}
        [strip] = detail["llm_nodes"]
        assert strip["node_id"] == "draft"
        judged = [(v["action"], v["level"], v["confidence"]) for v in strip["verdicts"]]
        assert ("retry", "quality", 0.4) in judged
        assert judged[-1] == ("accept", "quality", 0.9)
        assert any(v["feedback"] == VAGUE for v in strip["verdicts"])

        listed = (await s.client.get("/api/runs", params={"status": "paused"})).json()
        assert [r["run_id"] for r in listed["runs"]] == [run_id]

        response = await s.client.post(
            f"/api/runs/{run_id}/approve",
            json={"input": {"approved": True, "note": "ok by Ana"}, "by": "ana"},
            headers=AUTH,
        )
        assert response.status_code == 202, response.text
        done = await s.wait_status(run_id, "completed", "failed")
        assert done["summary"]["status"] == "completed"
        assert done["summary"]["quality"] == "clean"
        assert done["memory"]["published"] == "PUBLISHED: TP 1234 LIS-JFK"
        assert done["memory"]["reviewed_by"] == "ok by Ana"
        assert done["path"] == ["draft", "review", "publish"]

        verify = (await s.client.get(f"/api/runs/{run_id}/verify")).json()
        assert verify["ok"] is True
        assert verify["checked"] == done["summary"]["last_seq"]


async def test_every_change_needs_the_token_and_a_refused_one_changes_nothing(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "token"}):
            response = await s.client.post("/api/runs", json={"graph": "quick"}, headers=headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"] == "unauthorized"
        assert (await s.client.get("/api/runs")).json()["runs"] == []

        run_id = await _start(s, "quick")
        paused = await s.wait_status(run_id, "paused")
        for action in ("approve", "resume", "cancel", "pause", "fork"):
            body = {"at_seq": 1} if action == "fork" else {}
            response = await s.client.post(f"/api/runs/{run_id}/{action}", json=body)
            assert response.status_code == 401, action
        after = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert after["summary"]["status"] == "paused"
        assert after["summary"]["last_seq"] == paused["summary"]["last_seq"]
        assert len((await s.client.get("/api/runs")).json()["runs"]) == 1


async def test_bad_requests_get_clear_4xx_answers(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        post = s.client.post
        bad_json = await post("/api/runs", content=b"{not json", headers=AUTH)
        assert bad_json.status_code == 400
        assert bad_json.json()["error"] == "invalid_json"

        typo = await post("/api/runs", json={"graph": "quick", "inptu": {}}, headers=AUTH)
        assert typo.status_code == 422
        assert "inptu" in typo.json()["detail"]

        wrong_type = await post("/api/runs", json={"graph": "quick", "input": [1]}, headers=AUTH)
        assert wrong_type.status_code == 422
        assert "$.input" in wrong_type.json()["detail"]

        unknown = await post("/api/runs", json={"graph": "nope"}, headers=AUTH)
        assert unknown.status_code == 404
        assert "quick" in unknown.json()["detail"]

        missing = await s.client.get("/api/runs/no-such-run")
        assert missing.status_code == 404
        assert missing.json()["run_id"] == "no-such-run"
        assert (
            await post("/api/runs/no-such-run/approve", json={"by": "ann"}, headers=AUTH)
        ).status_code == 404

        for query in (
            {"limit": "0"},
            {"limit": "x"},
            {"status": "sleeping"},
            {"cursor": "-1"},
            {"cursor": "1.5~2" * 20},
            {"graph": "a\x00b"},
            {"created_after": "nan"},
        ):
            response = await s.client.get("/api/runs", params=query)
            assert response.status_code == 400, query
            assert response.json()["error"] == "bad_query"

        run_id = await _start(s, "quick", run_id="fixed-id")
        assert run_id == "fixed-id"
        again = await post("/api/runs", json={"graph": "quick", "run_id": "fixed-id"}, headers=AUTH)
        assert again.status_code == 409
        await s.wait_status(run_id, "paused")
        await post(
            f"/api/runs/{run_id}/approve", json={"input": {"ok": 1}, "by": "ann"}, headers=AUTH
        )
        await s.wait_status(run_id, "completed")
        late = await post(f"/api/runs/{run_id}/approve", json={"by": "ann"}, headers=AUTH)
        assert late.status_code == 409
        assert (late.json()["error"], late.json()["status"]) == ("run_changed", "completed")
        assert "already completed" in late.json()["detail"]
        for action in ("cancel", "pause"):  # what happened, the same from each control
            answer = await post(f"/api/runs/{run_id}/{action}", json={}, headers=AUTH)
            assert answer.status_code == 409
            assert (answer.json()["error"], answer.json()["status"]) == ("run_changed", "completed")


async def test_runs_list_filters_and_pages(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        quick = [await _start(s, "quick") for _ in range(5)]
        for run_id in quick:
            await s.wait_status(run_id, "paused")
        reviewed = await _start(s, "reviewed")
        await s.wait_status(reviewed, "paused")
        for run_id in quick[:2]:
            approve = {"input": {"ok": 1}, "by": "ann"}
            await s.client.post(f"/api/runs/{run_id}/approve", json=approve, headers=AUTH)
            await s.wait_status(run_id, "completed")
        await s.client.post(f"/api/runs/{quick[2]}/cancel", json={}, headers=AUTH)
        await s.wait_status(quick[2], "cancelled")

        async def ids(**params: Any) -> list[str]:
            body = (await s.client.get("/api/runs", params=params)).json()
            return [r["run_id"] for r in body["runs"]]

        newest_first = [reviewed, *reversed(quick)]
        assert await ids() == newest_first
        assert await ids(graph="quick") == list(reversed(quick))
        assert await ids(graph="reviewed") == [reviewed]
        assert await ids(status="paused") == [reviewed, quick[4], quick[3]]
        assert await ids(status="completed") == [quick[1], quick[0]]
        assert await ids(quality="clean") == [quick[1], quick[0]]
        assert await ids(status="cancelled", graph="quick") == [quick[2]]

        runs = (await s.client.get("/api/runs")).json()["runs"]
        created = {r["run_id"]: r["created"] for r in runs}
        middle = created[quick[2]]
        assert set(await ids(created_after=middle)) == {reviewed, quick[4], quick[3], quick[2]}
        assert set(await ids(created_before=middle)) == {quick[1], quick[0]}  # before: <
        graph_hash = runs[0]["graph_hash"]
        assert await ids(graph=graph_hash) == [reviewed]

        for filters in ({}, {"graph": "quick"}, {"status": "paused"}):
            seen: list[str] = []
            cursor: str | None = ""
            while cursor is not None:
                page = (
                    await s.client.get(
                        "/api/runs", params={"limit": 2, "cursor": cursor, **filters}
                    )
                ).json()
                assert len(page["runs"]) <= 2
                seen += [r["run_id"] for r in page["runs"]]
                cursor = page["next_cursor"]
            assert seen == await ids(limit=500, **filters)
        assert await ids(graph="quick", limit=2) == [quick[4], quick[3]]
        bad = await s.client.get("/api/runs", params={"cursor": "page-2"})
        assert bad.status_code == 400 and bad.json()["error"] == "bad_query"


async def test_events_page_and_filter_and_state_travels_in_time(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _start(s, "reviewed", input={"topic": "Lisbon"})
        await s.client.post(f"/api/runs/{run_id}/approve", json={"by": "ann"}, headers=AUTH)
        detail = await s.wait_status(run_id, "paused", "completed", "failed")
        last_seq = detail["summary"]["last_seq"]

        seqs: list[int] = []
        after: int | None = 0
        while after is not None:
            page = (
                await s.client.get(
                    f"/api/runs/{run_id}/events", params={"after": after, "limit": 3}
                )
            ).json()
            assert len(page["events"]) <= 3
            seqs += [e["seq"] for e in page["events"]]
            after = page["next_after"]
        assert seqs == list(range(1, last_seq + 1))

        events = (await s.client.get(f"/api/runs/{run_id}/events", params={"limit": 1000})).json()
        all_events = events["events"]
        assert all_events[0]["type"] == "run.started"
        verdicts = (
            await s.client.get(f"/api/runs/{run_id}/events", params={"type": "judge.verdict"})
        ).json()["events"]
        assert verdicts and {e["type"] for e in verdicts} == {"judge.verdict"}
        assert len(verdicts) == sum(1 for e in all_events if e["type"] == "judge.verdict")
        llm = (await s.client.get(f"/api/runs/{run_id}/events", params={"type": "llm."})).json()
        assert {e["type"] for e in llm["events"]} == {"llm.turn"}
        drafted = (
            await s.client.get(f"/api/runs/{run_id}/events", params={"node": "draft"})
        ).json()
        assert drafted["events"] and all(
            "draft" in (e["body"].get("node_id"), e["body"].get("source"), e["body"].get("target"))
            for e in drafted["events"]
        )

        first_output = next(e["seq"] for e in all_events if e["type"] == "output.set")
        at_start = (await s.client.get(f"/api/runs/{run_id}/state", params={"at": 1})).json()
        assert at_start["memory"] == {"topic": "Lisbon"}
        assert at_start["last_seq"] == 1
        mid = (await s.client.get(f"/api/runs/{run_id}/state", params={"at": first_output})).json()
        assert mid["outputs"] == {"draft": {"draft": "fly somewhere"}}
        now = (await s.client.get(f"/api/runs/{run_id}/state")).json()
        assert now["last_seq"] == last_seq
        assert now["memory"]["draft"] == "TP 1234 LIS-JFK"
        assert (await s.client.get("/api/runs/none/state")).status_code == 404
        assert (await s.client.get(f"/api/runs/{run_id}/state?at=0")).status_code == 400
        past = await s.client.get(f"/api/runs/{run_id}/state", params={"at": last_seq + 1})
        assert past.status_code == 400
        assert f"past the run's last event (seq {last_seq})" in past.json()["detail"]


async def test_cancel_and_resume_over_http(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _start(s, "quick")
        await s.wait_status(run_id, "paused")
        response = await s.client.post(
            f"/api/runs/{run_id}/cancel", json={"reason": "not needed"}, headers=AUTH
        )
        assert response.status_code == 202
        await s.wait_status(run_id, "cancelled")
        events = (await s.client.get(f"/api/runs/{run_id}/events", params={"type": "run."})).json()
        assert events["events"][-1]["type"] == "run.cancelled"
        assert events["events"][-1]["body"] == {"node_id": "gate", "reason": "not needed"}
        # Cancelled at its gate, a resume waits at the gate again; only an approval passes.
        resumed = await s.client.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
        assert resumed.status_code == 202, resumed.text
        waiting = await s.wait_status(run_id, "paused")
        assert waiting["summary"]["paused"]["reason"] == "hitl"
        again = await s.client.post(f"/api/runs/{run_id}/resume", json={}, headers=AUTH)
        assert again.status_code == 409
        assert "waits for approval at gate 'gate'" in again.json()["detail"]
        approved = await s.client.post(
            f"/api/runs/{run_id}/approve", json={"input": {"ok": True}, "by": "ann"}, headers=AUTH
        )
        assert approved.status_code == 202, approved.text
        done = await s.wait_status(run_id, "completed")
        assert done["memory"]["ok"] is True
        assert done["path"] == ["step", "gate"]
        not_live = await s.client.post(f"/api/runs/{run_id}/pause", headers=AUTH)
        assert not_live.status_code == 409


async def test_openapi_graphs_and_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    Counter("probe_total", "a probe", registry=registry).inc(3)
    async with served(tmp_path / "runs.db", registry=registry) as s:
        spec = (await s.client.get("/openapi.json")).json()
        assert spec["openapi"].startswith("3.")
        for path in ("/api/runs", "/api/runs/{run_id}/approve", "/api/runs/{run_id}/stream"):
            assert path in spec["paths"]
        assert spec["paths"]["/api/runs"]["post"]["security"] == [{"bearer": []}]
        graphs = (await s.client.get("/api/graphs")).json()["graphs"]
        assert [g["name"] for g in graphs] == ["reviewed", "quick", "loop", "held"]
        assert graphs[0]["spec"]["pause_nodes"] == ["review"]
        metrics = await s.client.get("/metrics")
        assert metrics.status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
        assert families["probe"].samples[0].value == 3


async def test_fork_from_a_seq_with_edited_input(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = await _start(s, "quick", input={"who": "Ana"})
        paused = await s.wait_status(run_id, "paused")
        at = paused["summary"]["last_seq"]
        response = await s.client.post(
            f"/api/runs/{run_id}/fork", json={"at_seq": at, "input": {"ok": 2}}, headers=AUTH
        )
        assert response.status_code == 201, response.text
        fork_id = response.json()["run_id"]
        assert fork_id != run_id
        # The fork waits at the gate the source waits at: only an approval passes it.
        waiting = await s.wait_status(fork_id, "paused")
        assert waiting["summary"]["paused"]["waiting_for"] == []  # the fork's input gave ok
        approve = await s.client.post(
            f"/api/runs/{fork_id}/approve", json={"by": "ann"}, headers=AUTH
        )
        assert approve.status_code == 202, approve.text
        forked = await s.wait_status(fork_id, "completed", "failed")
        assert forked["summary"]["status"] == "completed"
        assert forked["memory"]["ok"] == 2 and forked["memory"]["who"] == "Ana"
        source = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert source["summary"]["status"] == "paused"
        assert source["summary"]["last_seq"] == at
        assert (await s.client.get(f"/api/runs/{fork_id}/verify")).json()["ok"] is True

        past = await s.client.post(
            f"/api/runs/{run_id}/fork", json={"at_seq": at + 50}, headers=AUTH
        )
        assert past.status_code == 409
        zero = await s.client.post(f"/api/runs/{run_id}/fork", json={"at_seq": 0}, headers=AUTH)
        assert zero.status_code == 422


async def test_verify_names_the_seq_where_an_edited_log_breaks(tmp_path: Path) -> None:
    from .support import forge_a_verdict

    async with served(tmp_path / "runs.db") as s:
        run_id = await _start(s, "reviewed")
        paused = await s.wait_status(run_id, "paused")
        seq = forge_a_verdict(tmp_path / "runs.db", run_id)
        report = (await s.client.get(f"/api/runs/{run_id}/verify")).json()
        assert report["ok"] is False
        assert report["broken_at"] == seq
        assert report["checked"] == seq - 1
        assert "hash" in report["reason"]
        assert (await s.client.get(f"/api/runs/{run_id}")).json()["summary"]["last_seq"] == (
            paused["summary"]["last_seq"]
        )


async def test_pause_and_cancel_a_live_run_over_http(tmp_path: Path) -> None:
    from .support import GATE

    async with served(tmp_path / "runs.db") as s:
        GATE.clear()
        run_id = await _start(s, "held")
        running = await s.wait_status(run_id, "running")
        assert running["current"] == ["hold"]
        response = await s.client.post(f"/api/runs/{run_id}/pause", headers=AUTH)
        assert response.status_code == 202
        assert response.json() == {"run_id": run_id, "action": "pause requested"}
        GATE.set()
        paused = await s.wait_status(run_id, "paused", "completed")
        assert paused["summary"]["status"] == "paused"  # at the boundary before "after"
        assert paused["summary"]["paused"]["reason"] == "user"
        assert paused["summary"]["paused"]["node_id"] == "after"
        assert paused["path"] == ["hold"]
        await s.client.post(f"/api/runs/{run_id}/resume", headers=AUTH)
        done = await s.wait_status(run_id, "completed")
        assert done["path"] == ["hold", "after"]

        GATE.clear()
        second = await _start(s, "held")
        await s.wait_status(second, "running")
        cancel = await s.client.post(
            f"/api/runs/{second}/cancel", json={"reason": "stop"}, headers=AUTH
        )
        assert cancel.status_code == 202
        cancelled = await s.wait_status(second, "cancelled")
        assert cancelled["path"] == []
        GATE.set()
