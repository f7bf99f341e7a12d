"""Messages that say what is true: a decision's ``expected_seq`` past the log's end is
named as such (not "moved on since"), a stale one on a paused run is not "already
paused", and an error naming a huge run id shows its start and length, not all of it
(the exception keeps it whole)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runtime import RunChangedError, RunNotFoundError, RunStateError, Runtime
from runtime.reads import RunReader
from runtime.server import create_app

from .server.support import AUTH, TOKEN, live_server
from .test_heads_file import GRAPH, step

pytestmark = pytest.mark.anyio


async def _paused(rt: Runtime) -> tuple[str, int]:
    handle = await rt.start(GRAPH, input={"amount": 100})
    assert (await handle.result()).status == "paused"
    return handle.run_id, (await rt.get_state(handle.run_id)).last_seq


async def test_an_expected_seq_past_the_logs_end_is_named_as_such(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        run_id, now = await _paused(rt)
        ahead = now + 12
        for decide in (
            rt.approve(run_id, by="ann", expected_seq=ahead),
            rt.reject(run_id, by="ann", reason="no", expected_seq=ahead),
        ):
            with pytest.raises(RunChangedError) as caught:
                await decide
            assert str(caught.value) == (
                f"run {run_id} is paused: expected seq {ahead}, but its log ends at seq "
                f"{now}: look at it again before deciding"
            )
            assert caught.value.status == "paused"
        state = await rt.get_state(run_id)
        assert (state.last_seq, state.status) == (now, "paused")  # nothing recorded
        app = create_app(rt, token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            answer = await c.post(
                f"/api/runs/{run_id}/approve",
                json={"by": "ann", "expected_seq": ahead},
                headers=AUTH,
            )
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"] == "run_changed"
        assert f"expected seq {ahead}, but its log ends at seq {now}" in answer.json()["detail"]


async def test_a_stale_expected_seq_on_a_paused_run_is_not_already_paused(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        run_id, now = await _paused(rt)
        with pytest.raises(RunChangedError) as caught:
            await rt.approve(run_id, by="ann", expected_seq=now - 1)
        assert str(caught.value) == (
            f"run {run_id} is paused: its log moved on since seq {now - 1} (it is at seq "
            f"{now} now): look at it again before deciding"
        )
        # Other lost races still say what the run already is.
        await rt.cancel(run_id, reason="stop")
        with pytest.raises(RunChangedError, match="is cancelled: already cancelled"):
            await rt.cancel(run_id)


HUGE = "r" * 100_000


async def test_errors_naming_a_huge_run_id_show_its_start_and_length(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        for read in (rt.get_state(HUGE), rt.result(HUGE), rt.fork(HUGE, 1)):
            with pytest.raises(RunNotFoundError) as caught:
                await read
            assert caught.value.run_id == HUGE  # whole, for code
            assert str(caught.value) == f"no run with id {'r' * 60!r}... (100000 characters)"
        assert rt.store is not None
        with pytest.raises(RunNotFoundError) as caught:
            await RunReader(rt.store).report(HUGE)
        assert len(str(caught.value)) < 120
        with pytest.raises(ValueError) as refused:
            await rt.start(GRAPH, input={"amount": 1}, run_id=HUGE)
        assert str(refused.value).endswith(f"{'r' * 60!r}... (100000 characters)")
    short = RunNotFoundError("run-1")
    assert str(short) == "no run with id 'run-1'"
    state = RunStateError(HUGE, "paused", "why")
    assert str(state) == f"run {'r' * 60}... (100000 characters) is paused: why"
    assert state.run_id == HUGE
    edge = "e" * 80  # 80 characters are shown whole
    assert str(RunStateError(edge, "paused", "why")) == f"run {edge} is paused: why"
