"""A replay runs the recorded run again in memory under the run's own id: it logs no run
events (``run X started``, ``finished``), which would tell a log reader the run ran
again; the run's own records are as they were."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runtime import Runtime
from runtime.testing import function_node, linear_graph

pytestmark = pytest.mark.anyio


def step(inputs: dict[str, object]) -> dict[str, object]:
    return {"done": True}


async def test_a_replay_logs_no_run_events(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    graph = linear_graph([function_node("a", "step", output_keys=["done"])])
    caplog.set_level(logging.INFO, logger="magistrate.runs")
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        result = await (await rt.start(graph)).result()
        assert result.status == "completed"
        ran = [r.getMessage() for r in caplog.records if r.name == "magistrate.runs"]
        assert ran == [
            f"run {result.run_id} started: graph {graph.id}",
            f"run {result.run_id} finished: completed, quality clean",
        ]
        caplog.clear()
        assert (await rt.replay(result.run_id)).equal
        assert [r.getMessage() for r in caplog.records if r.name == "magistrate.runs"] == []
        # Logging goes on for the runs after it.
        again = await (await rt.start(graph)).result()
    assert f"run {again.run_id} started: graph {graph.id}" in caplog.messages
