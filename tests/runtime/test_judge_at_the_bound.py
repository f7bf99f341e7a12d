"""A judge's RETRY on a node's last allowed turn: the bound ends the node (ACCEPT with its
outputs set, the seed's "terminates regardless of the verdict"), and the RETRY it overrules
is recorded before that ACCEPT, which names it; a replay of the run serves that recorded
answer and comes out equal."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime import NodeSpec, Runtime, RuntimeMetrics
from runtime.events import Verdict
from runtime.testing import ScriptedProvider, linear_graph, reply, tool_call

pytestmark = pytest.mark.anyio

REJECTED = '{"verdict": "RETRY", "feedback": "the answer is wrong"}'


async def test_the_retry_the_bound_overrules_is_recorded(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="wrong")), reply("done")],
        judge=[REJECTED],
    )
    node = NodeSpec(
        id="n",
        kind="llm",
        output_keys=["answer"],
        success_criteria=["the answer is right"],
        max_iterations=2,
    )
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(tmp_path / "runs.db", provider=provider, metrics=metrics) as rt:
        result = await (await rt.start(linear_graph([node]))).result()
        assert result.status == "completed" and result.memory == {"answer": "wrong"}
        overruled = {"reason": "overruled"}
        assert registry.get_sample_value("magistrate_judge_failures_total", overruled) == 1
        verdicts = [e.body for e in await rt.read_events(result.run_id) if type(e.body) is Verdict]
        last_two = [(v.iteration, v.level, v.action) for v in verdicts[-2:]]
        assert last_two == [(2, "quality", "retry"), (2, "max_iterations", "accept")]
        assert verdicts[-2].feedback == "the answer is wrong"
        assert verdicts[-1].feedback.endswith("It overrules the quality RETRY of this turn.")
        # The check ran and was not passed: the run is degraded, and says why.
        assert result.quality == "degraded"
        state = await rt.get_state(result.run_id)
        assert state.judge_failures == {"overruled": 1}
        [failure] = state.judge_failure_reasons
        assert (failure.kind, failure.node_id) == ("overruled", "n")
        assert failure.reason == (
            "max_iterations accepted the outputs over a quality RETRY: the answer is wrong"
        )
        replayed = await rt.replay(result.run_id)
        assert replayed.equal, replayed


async def test_a_node_accepted_at_the_bound_without_a_retry_leaves_the_run_clean(
    tmp_path: Path,
) -> None:
    """A RETRY on an earlier turn, and the last turn not judged (the model was calling
    tools): the bound overrules nothing."""
    provider = ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value="first")),
            reply("done"),
            reply("", tool_call("set_output", key="answer", value="right")),
        ],
        judge=[REJECTED],
    )
    node = NodeSpec(
        id="n",
        kind="llm",
        output_keys=["answer"],
        success_criteria=["the answer is right"],
        max_iterations=3,
    )
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(tmp_path / "runs.db", provider=provider, metrics=metrics) as rt:
        result = await (await rt.start(linear_graph([node]))).result()
        assert result.status == "completed", result.error
        overruled = {"reason": "overruled"}
        assert registry.get_sample_value("magistrate_judge_failures_total", overruled) == 0
        verdicts = [e.body for e in await rt.read_events(result.run_id) if type(e.body) is Verdict]
        judged = [(v.iteration, v.level, v.action) for v in verdicts if v.level != "bail_out"]
        assert judged == [(2, "quality", "retry"), (3, "max_iterations", "accept")]
        assert result.quality == "clean" and result.memory == {"answer": "right"}
        assert (await rt.get_state(result.run_id)).judge_failures == {}
