"""Two clients deciding one gate at once, and a stream reconnecting with a bad ``?after=``
beside its ``Last-Event-ID``, over real HTTP on two connections."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from .support import AUTH, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_two_clients_deciding_one_gate_at_once_record_one_decision(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s, httpx.AsyncClient(base_url=s.url) as other:
        for second in ("approve", "reject"):
            started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            run_id = started.json()["run_id"]
            seen = (await s.wait_status(run_id, "paused"))["summary"]["last_seq"]
            answers = await asyncio.gather(
                s.client.post(
                    f"/api/runs/{run_id}/approve",
                    json={"by": "ann", "input": {"ok": 1}, "expected_seq": seen},
                    headers=AUTH,
                ),
                other.post(
                    f"/api/runs/{run_id}/{second}",
                    json={"by": "bob", "input": {"ok": 2}, "expected_seq": seen}
                    if second == "approve"
                    else {"by": "bob", "expected_seq": seen},
                    headers=AUTH,
                ),
            )
            codes = sorted(a.status_code for a in answers)
            assert codes == [202, 409], [a.text for a in answers]
            refused = next(a for a in answers if a.status_code == 409).json()
            assert refused["error"] in ("run_changed", "run_state"), refused
            await s.wait_status(run_id, "completed", "cancelled")
            decisions = await s.client.get(
                f"/api/runs/{run_id}/events", params={"type": "approval."}
            )
            assert len(decisions.json()["events"]) == 1, decisions.text


async def test_a_bad_after_beside_a_last_event_id_is_refused(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        answer = await s.client.get(
            f"/api/runs/{run_id}/stream", params={"after": "-1"}, headers={"Last-Event-ID": "2"}
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "bad_query"
        # A valid pair: the header wins, the stream starts after its seq.
        async with s.client.stream(
            "GET",
            f"/api/runs/{run_id}/stream",
            params={"after": "1"},
            headers={"Last-Event-ID": "5"},
        ) as stream:
            assert stream.status_code == 200
            async for line in stream.aiter_lines():
                if line.startswith("id: "):
                    assert line == "id: 6"
                    break
