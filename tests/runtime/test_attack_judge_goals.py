"""Judges and feedback in every count: a judge that fails on any turn is counted wherever
the run says it failed, a conversation node ending at its bound is no failed check, and
every turn that called tools is counted as one."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime import (
    GraphSpec,
    JudgeContext,
    JudgeVerdict,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    Runtime,
    RuntimeMetrics,
    tool,
)
from runtime.events import Verdict, describe_event
from runtime.testing import ScriptedProvider, reply, tool_call

pytestmark = pytest.mark.anyio


def _turns(request: LlmRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


class _FailsOnTurn:
    """A custom judge that raises on turn ``turn`` and accepts once the keys are set."""

    def __init__(self, turn: int) -> None:
        self.turn = turn

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict | str:
        if context.iteration == self.turn:
            raise RuntimeError("the judge's model is down")
        return "retry" if context.turn_had_tool_calls or context.missing_keys else "accept"


def _sets_then_answers(request: LlmRequest) -> LlmResponse:
    if _turns(request) == 0:
        return reply("", tool_call("set_output", key="a", value="x"))
    return reply("Done.")


async def test_a_judge_failing_on_a_tool_turn_is_counted_as_a_judge_failure_everywhere(
    tmp_path: Path,
) -> None:
    """The failed judge's turn called tools, so the cascade without it goes on (the
    bail-out); the check did not run all the same: the run is degraded, its state and
    the metrics both count the judge failure."""
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    node = NodeSpec(id="n", kind="llm", output_keys=["a"], judge="flaky")
    graph = GraphSpec(id="g", entry_node="n", nodes=[node])
    provider = ScriptedProvider(_sets_then_answers)
    async with Runtime(
        tmp_path / "run.db", provider=provider, judges={"flaky": _FailsOnTurn(1)}, metrics=metrics
    ) as rt:
        result = await (await rt.start(graph)).result()
        state = await rt.get_state(result.run_id)
        events = await rt.read_events(result.run_id)
    assert (result.status, result.quality) == ("completed", "degraded")
    assert state.judge_failures == {"judge": 1}
    [failed] = [e for e in events if isinstance(e.body, Verdict) and e.body.error]
    assert failed.body.level == "bail_out"
    detail = describe_event(failed)[2]  # the audit timeline's line
    assert detail.endswith(
        "(judge error: custom judge failed: RuntimeError: the judge's model is down)"
    )
    failures = registry.get_sample_value("magistrate_judge_failures_total", {"reason": "judge"})
    assert failures == 1
    judge_errors = registry.get_sample_value("magistrate_provider_errors_total", {"kind": "judge"})
    assert judge_errors == 1
    assert registry.get_sample_value("magistrate_llm_tool_turns_total") == 1


async def test_a_conversation_node_ending_at_its_bound_leaves_the_run_clean(
    tmp_path: Path,
) -> None:
    """A client-facing node with no output keys never auto-accepts: it converses until
    max_iterations ends it (the seed's edge case), its normal end. Its RETRY on the last
    turn is its wait for the user, not a check the bound overrules."""
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    node = NodeSpec(id="chat", kind="llm", client_facing=True, max_iterations=2)
    graph = GraphSpec(id="chat", entry_node="chat", nodes=[node])
    provider = ScriptedProvider(lambda request: reply(f"Question {_turns(request) + 1}?"))
    async with Runtime(tmp_path / "run.db", provider=provider, metrics=metrics) as rt:
        handle = await rt.start(graph)
        assert (await handle.result()).paused_reason == "input"
        result = await (await rt.resume(handle.run_id, input={"answer": "Lisbon"})).result()
        state = await rt.get_state(handle.run_id)
    assert (result.status, result.quality) == ("completed", "clean")
    assert state.judge_failures == {}
    overruled = {"reason": "overruled"}
    assert registry.get_sample_value("magistrate_judge_failures_total", overruled) == 0


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _looks_up_five_times(request: LlmRequest) -> LlmResponse:
    turns = _turns(request)
    if turns < 5:
        return reply("", tool_call("lookup", q=str(turns)))
    if turns == 5:
        return reply("", tool_call("set_output", key="a", value=1))
    return reply("Done.")


async def test_every_turn_that_called_tools_is_counted_with_judge_every_n_turns(
    tmp_path: Path,
) -> None:
    """A tool turn the judge is not asked about (``judge_every_n_turns``) counts as the
    RETRY with nothing injected that the bail-out is: recorded as one, so the run's
    ``tool_turns``, its ``verdicts`` and the metric count all six."""
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    node = NodeSpec(id="n", kind="llm", output_keys=["a"], tools=["lookup"], judge_every_n_turns=3)
    graph = GraphSpec(id="g", entry_node="n", nodes=[node])
    provider = ScriptedProvider(_looks_up_five_times)
    async with Runtime(
        tmp_path / "run.db", provider=provider, tools=[lookup], metrics=metrics
    ) as rt:
        result = await (await rt.start(graph)).result()
        state = await rt.get_state(result.run_id)
        report = await rt.replay(result.run_id)
    assert (result.status, result.quality) == ("completed", "clean")
    assert result.iterations == {"n": 7}
    assert result.tool_turns == state.tool_turns == {"n": 6}
    assert result.verdicts == {"n": {"retry": 6, "accept": 1}}
    assert registry.get_sample_value("magistrate_llm_tool_turns_total") == 6
    assert report.equal, report.summary()


async def test_a_run_recorded_without_marks_for_its_unjudged_tool_turns_replays_equal(
    tmp_path: Path,
) -> None:
    """A run recorded before un-judged tool turns were marked (no bail-out verdict for
    them) replays equal: a bail-out is the turn's own mark, told by the turn, not a
    judgment the replay compares."""
    node = NodeSpec(id="n", kind="llm", output_keys=["a"], tools=["lookup"], judge_every_n_turns=3)
    graph = GraphSpec(id="g", entry_node="n", nodes=[node])
    provider = ScriptedProvider(_looks_up_five_times)
    async with Runtime(tmp_path / "run.db", provider=provider, tools=[lookup]) as rt:
        result = await (await rt.start(graph)).result()
        bodies = [
            e.body
            for e in await rt.read_events(result.run_id)
            if not (isinstance(e.body, Verdict) and e.body.level == "bail_out")
        ]
        assert len(bodies) < len(await rt.read_events(result.run_id))
        assert rt.store is not None
        await rt.store.append("older", bodies, expected_seq=0)
        report = await rt.replay("older")
    assert report.equal, report.summary()
