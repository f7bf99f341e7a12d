"""A careless or hostile client over real HTTP: a query parameter a path does not take or
gives twice, a body declared as something other than JSON, a HEAD on an event stream. Each
is answered with a clear 4xx (or, for the HEAD, the stream's headers and an end), and a
refused request records nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from .support import AUTH, Served, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def _paused(s: Served) -> dict[str, Any]:
    started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
    assert started.status_code == 201, started.text
    return await s.wait_status(started.json()["run_id"], "paused")


async def test_an_expected_seq_sent_in_the_query_is_refused_not_ignored(tmp_path: Path) -> None:
    """A stale ``expected_seq`` put in the query instead of the body would be dropped, and
    the approval of a run the approver did not see go through."""
    async with served(tmp_path / "runs.db") as s:
        run = await _paused(s)
        run_id, seen = run["summary"]["run_id"], run["summary"]["last_seq"]
        answer = await s.client.post(
            f"/api/runs/{run_id}/approve",
            params={"expected_seq": 1},
            json={"by": "ann", "input": {"ok": 1}},
            headers=AUTH,
        )
        assert answer.status_code == 400, answer.text
        assert answer.json() == {
            "error": "bad_query",
            "detail": "unknown query parameter 'expected_seq' (this path takes: none)",
        }
        after = (await s.client.get(f"/api/runs/{run_id}")).json()["summary"]
        assert (after["status"], after["last_seq"]) == ("paused", seen)


async def test_unknown_and_repeated_query_parameters_are_refused(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        run_id = (await _paused(s))["summary"]["run_id"]
        # A typo of a filter would list every run as if it had matched.
        typo = await s.client.get("/api/runs", params={"stauts": "paused"})
        assert typo.status_code == 400, typo.text
        assert typo.json()["error"] == "bad_query"
        assert "'stauts'" in typo.json()["detail"] and "status" in typo.json()["detail"]
        # A second node= would be dropped: only one node's events shown as if all.
        twice = await s.client.get(f"/api/runs/{run_id}/events?node=step&node=gate")
        assert twice.status_code == 400, twice.text
        assert "given twice" in twice.json()["detail"]
        assert "comma-separated" in twice.json()["detail"]
        for path in (
            "/api/graphs?x=1",
            f"/api/runs/{run_id}?verbose=1",
            f"/api/runs/{run_id}/verify?full=1",
            f"/api/runs/{run_id}/state?at=1&seq=2",
            "/api/runs?limit=1&limit=2",
        ):
            answer = await s.client.get(path)
            assert answer.status_code == 400, (path, answer.text)
            assert answer.json()["error"] == "bad_query", path
        # What the paths take still works, the dashboard's pages keep their own filters.
        both = await s.client.get(f"/api/runs/{run_id}/events?node=step,gate&limit=5")
        assert both.status_code == 200, both.text
        assert (await s.client.get("/?status=paused&x=1")).status_code == 200


async def test_a_body_declared_as_not_json_is_refused_and_starts_nothing(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        body = b'{"graph": "quick"}'
        for declared in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            answer = await s.client.post(
                "/api/runs", content=body, headers={**AUTH, "Content-Type": declared}
            )
            assert answer.status_code == 415, (declared, answer.text)
            assert answer.json()["error"] == "unsupported_media_type"
            assert declared in answer.json()["detail"]
        form = await s.client.post("/api/runs", data={"graph": "quick"}, headers=AUTH)
        assert form.status_code == 415, form.text
        assert (await s.client.get("/api/runs")).json()["runs"] == []
        # JSON, declared so (a charset, a +json type) or not declared at all, is taken.
        for declared in ("application/json; charset=utf-8", "application/vnd.api+json", None):
            headers = AUTH if declared is None else {**AUTH, "Content-Type": declared}
            answer = await s.client.post("/api/runs", content=body, headers=headers)
            assert answer.status_code == 201, (declared, answer.text)
        # An empty body is {} whatever its declared type (curl -d '' sends a form's).
        run_id = (await _paused(s))["summary"]["run_id"]
        empty = await s.client.post(
            f"/api/runs/{run_id}/cancel",
            content=b"",
            headers={**AUTH, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert empty.status_code == 202, empty.text


async def test_a_head_on_an_event_stream_ends_and_frees_its_connection(tmp_path: Path) -> None:
    """A HEAD answered with a stream that never ends held its connection for ever: the
    next request on it waited with it."""
    async with served(tmp_path / "runs.db") as s:
        run_id = (await _paused(s))["summary"]["run_id"]
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=s.url, limits=one, timeout=30) as client:
            for path in ("/api/stream", f"/api/runs/{run_id}/stream"):
                with anyio.fail_after(20):
                    head = await client.head(path)
                    assert head.status_code == 200
                    assert head.headers["content-type"].startswith("text/event-stream")
                    # The same (only) connection answers the next request.
                    after = await client.get("/api/graphs")
                assert after.status_code == 200, after.text
            missing = await client.head("/api/runs/no-such-run/stream")
            assert missing.status_code == 404
            bad = await client.head(f"/api/runs/{run_id}/stream", headers={"Last-Event-ID": "x"})
            assert bad.status_code == 400
