"""A node's retry policy across a cancel, a resume and a crash: the attempts it allows are
counted over the run's log, so a resume continues at the next attempt, never the first."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import RunOwnedError
from runtime._runtime import Runtime
from runtime.engine._function_node import NodeContext
from runtime.events import NodeFailed, NodeStarted, RunCancelled
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec, RetryPolicy

from . import retry_crash_script

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _graph(delay: float) -> GraphSpec:
    return GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="a", function="plain"),
            NodeSpec(id="f", function="flaky"),
            NodeSpec(id="z", function="plain"),
        ],
        edges=[EdgeSpec(source="a", target="f"), EdgeSpec(source="f", target="z")],
        entry_node="a",
        terminal_nodes=["z"],
        retry=RetryPolicy(max_attempts=3, initial_delay=delay, max_delay=delay, jitter=0.0),
    )


async def test_a_retry_cancelled_in_its_backoff_resumes_at_its_next_attempt(
    tmp_path: Path,
) -> None:
    attempts: list[int] = []
    first_failed = anyio.Event()

    async def flaky(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        attempts.append(ctx.attempt)
        if len(attempts) == 1:  # only the run's first call fails
            first_failed.set()
            raise RuntimeError("the first call fails")
        return {"f": ctx.attempt}

    async def plain(inputs: dict[str, Any]) -> dict[str, Any]:
        return {}

    async with Runtime(tmp_path / "run.db", functions={"flaky": flaky, "plain": plain}) as rt:
        # A backoff far longer than the test: the cancel comes while the node waits in it.
        handle = await rt.start(_graph(3600.0))
        await first_failed.wait()
        # Committed: the node waits in its backoff.
        while not any(  # noqa: ASYNC110
            isinstance(e.body, NodeFailed) for e in await rt.read_events(handle.run_id)
        ):
            await anyio.sleep(0.01)
        await rt.cancel(handle.run_id)
        assert (await handle.result()).status == "cancelled"
        cancelled = await rt.get_state(handle.run_id)
        assert cancelled.running == {"f": 2}  # waiting for its second attempt
        assert cancelled.cancelled_at == "f"

        resumed = await rt.resume(handle.run_id)
        result = await resumed.result()

        # The resume runs the second attempt (at once), not the first again.
        assert attempts == [1, 2]
        assert result.status == "completed" and result.path == ["a", "f", "z"]
        assert result.memory["f"] == 2 and result.total_retries == 1
        events = await rt.read_events(handle.run_id)
        started = [e.body.attempt for e in events if isinstance(e.body, NodeStarted)]
        assert started == [1, 1, 2, 1]  # a, f's two attempts, z
        # The fold agrees at every point: at the cancel, f waits for attempt 2.
        cancel_seq = next(e.seq for e in events if isinstance(e.body, RunCancelled))
        at_cancel = await rt.get_state(handle.run_id, at_seq=cancel_seq)
        assert at_cancel.running == {"f": 2} and at_cancel.total_retries == 1
        assert (await rt.get_state(handle.run_id)) == await rt.get_state(
            handle.run_id, at_seq=events[-1].seq
        )


async def test_a_run_killed_in_a_retry_backoff_resumes_at_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, side = tmp_path / "run.db", tmp_path / "side.txt"
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-m", "tests.runtime.retry_crash_script", str(db), "r", str(side)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert side.read_text().split("\n")[:-1] == ["f 1"]

    monkeypatch.setattr(retry_crash_script, "SIDEFILE", str(side))
    async with Runtime(db, functions=retry_crash_script.FUNCTIONS) as rt:
        assert (await rt.get_state("r")).running == {"f": 2}
        while True:
            try:
                handle = await rt.resume("r")
                break
            except RunOwnedError:  # the killed process's lease has not expired yet
                await anyio.sleep(0.05)
        result = await handle.result()
        # The policy allows two attempts: the resume runs the second (at once, not after
        # the recorded backoff), not the first again.
        assert side.read_text().split("\n")[:-1] == ["f 1", "f 2"]
        assert result.status == "completed" and result.path == ["a", "f", "z"]
        assert result.memory["f"] == 2 and result.total_retries == 1
        events = await rt.read_events("r")
        f_starts = [
            e.body.attempt
            for e in events
            if isinstance(e.body, NodeStarted) and e.body.node_id == "f"
        ]
        assert f_starts == [1, 2]
