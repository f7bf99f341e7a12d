"""A decision made on what the approver saw: ``expected_seq`` (the run's last seq on their
page) refuses a run whose log moved on since, a cancel and a resume with other input that
leave it waiting at the same gate included, so nobody approves memory they did not see.
Held by the library, so the API, the dashboard and the CLI refuse alike."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runtime import RunChangedError, Runtime
from runtime.server import create_app

from .server.support import AUTH, TOKEN, live_server
from .test_heads_file import GRAPH, step

pytestmark = pytest.mark.anyio


async def _moved(rt: Runtime) -> tuple[str, int, int]:
    """A run paused at its gate with amount 100 (its seq then), then cancelled and resumed
    with amount 999: waiting at the same gate again (its seq now)."""
    handle = await rt.start(GRAPH, input={"amount": 100})
    assert (await handle.result()).status == "paused"
    seen = (await rt.get_state(handle.run_id)).last_seq
    await rt.cancel(handle.run_id, reason="to change the amount")
    again = await rt.resume(handle.run_id, input={"amount": 999})
    assert (await again.result()).status == "paused"
    now = (await rt.get_state(handle.run_id)).last_seq
    assert now > seen
    return handle.run_id, seen, now


async def test_a_decision_on_a_run_that_moved_on_is_refused_and_records_nothing(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        run_id, seen, now = await _moved(rt)
        for decide in (
            rt.approve(run_id, by="ann", expected_seq=seen),
            rt.reject(run_id, by="ann", reason="no", expected_seq=seen),
        ):
            with pytest.raises(RunChangedError, match=f"since seq {seen} .*at seq {now} now"):
                await decide
        assert (await rt.get_state(run_id)).last_seq == now  # nothing recorded
        with pytest.raises(ValueError, match="expected_seq must be 1 or more"):
            await rt.approve(run_id, by="ann", expected_seq=0)
        with pytest.raises(TypeError, match="expected_seq must be a seq"):
            await rt.approve(run_id, by="ann", expected_seq="7")  # type: ignore[arg-type]
        # Seen as it is now, it goes: on the memory the approver saw.
        handle = await rt.approve(run_id, by="ann", expected_seq=now)
        assert handle is not None
        result = await handle.result()
        assert result.status == "completed" and result.memory["paid"] == 999


async def test_the_api_refuses_a_stale_decision_with_409(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        run_id, seen, now = await _moved(rt)
        app = create_app(rt, token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            for action, body in (("approve", {"by": "ann"}), ("reject", {"by": "ann"})):
                path = f"/api/runs/{run_id}/{action}"
                stale = await c.post(path, json={**body, "expected_seq": seen}, headers=AUTH)
                assert stale.status_code == 409, stale.text
                assert stale.json()["error"] == "run_changed"
                bad = await c.post(path, json={**body, "expected_seq": 0}, headers=AUTH)
                assert bad.status_code == 422, bad.text
            assert (await rt.get_state(run_id)).last_seq == now
            fresh = await c.post(
                f"/api/runs/{run_id}/approve", json={"by": "ann", "expected_seq": now}, headers=AUTH
            )
            assert fresh.status_code == 202, fresh.text
