"""A check that did not run is never "clean": a failed judge, router or goal evaluator call
leaves the run at best degraded, says why in its log and timeline, and is counted by reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtime import Runtime
from runtime._errors import ProviderError
from runtime.events import EdgeTaken, RunFinished, Verdict
from runtime.events._timeline import describe_event, render_timeline
from runtime.observe import RuntimeMetrics
from runtime.providers._scripted import ScriptedProvider, reply
from runtime.spec import EdgeSpec, Goal, GraphSpec, SuccessCriterion

from .test_llm_node import fn, graph, llm, of, set_output

pytestmark = pytest.mark.anyio


def _failures(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value("magistrate_judge_failures_total", {"reason": reason})
    return 0.0 if value is None else value


async def _run(
    tmp_path: Path, g: GraphSpec, provider: ScriptedProvider, **options: Any
) -> tuple[Any, list[Any], Any, CollectorRegistry]:
    registry = CollectorRegistry()
    async with Runtime(
        tmp_path / "run.db", provider=provider, metrics=RuntimeMetrics(registry), **options
    ) as rt:
        handle = await rt.start(g)
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
        state = await rt.get_state(handle.run_id)
    return result, events, state, registry


async def test_a_failed_quality_judge_leaves_the_run_degraded_not_clean(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["be good"])
    refused = ProviderError("judge", "temperature is not supported", status=400)
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done")], judge=[refused, refused, refused]
    )
    result, events, state, registry = await _run(tmp_path, graph([node]), provider)
    # Fail-open as before: the node completes with its output...
    assert result.status == "completed" and result.memory == {"a": "x"}
    # ...but no quality check ran, so the run is not clean.
    assert result.quality == "degraded"
    assert state.judge_failures == {"judge": 1}
    [verdict] = [e for e in events if isinstance(e.body, Verdict) and e.body.error]
    [kept] = state.judge_failure_reasons
    assert (kept.seq, kept.kind, kept.node_id) == (verdict.seq, "judge", "n")
    assert "temperature is not supported" in kept.reason
    assert "temperature is not supported" in describe_event(verdict)[2]
    assert _failures(registry, "judge") == 1.0
    assert _failures(registry, "route") == 0.0


async def test_a_judge_that_answers_leaves_the_run_clean(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["be good"])
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done")],
        judge=['{"verdict": "ACCEPT", "confidence": 0.9}'],
    )
    result, _events, state, registry = await _run(tmp_path, graph([node]), provider)
    assert (result.status, result.quality) == ("completed", "clean")
    assert state.judge_failures == {}
    assert _failures(registry, "judge") == 0.0


def _decide() -> GraphSpec:
    return GraphSpec(
        id="decide",
        nodes=[fn("a"), fn("b"), fn("c")],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="b"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="b"),
        ],
        entry_node="a",
    )


FUNCTIONS = {"a": lambda i: {"a": 1}, "b": lambda i: {"took": "b"}, "c": lambda i: {"c": 1}}


@pytest.mark.parametrize(
    "answer",
    [ProviderError("router", "overloaded", status=529), '{"target": "nowhere"}'],
    ids=["call failed", "no candidate"],
)
async def test_a_router_fallback_after_a_failed_choice_is_degraded(
    tmp_path: Path, answer: Any
) -> None:
    provider = ScriptedProvider([], router=[answer])
    result, events, state, registry = await _run(tmp_path, _decide(), provider, functions=FUNCTIONS)
    assert result.status == "completed" and result.path == ["a", "b"]
    assert result.quality == "degraded"
    [taken] = of([e.body for e in events], EdgeTaken)
    assert taken.judge_error is not None and taken.reason.startswith("fallback: ")
    assert state.judge_failures == {"route": 1}
    [kept] = state.judge_failure_reasons
    assert (kept.kind, kept.node_id, kept.reason) == ("route", "a", taken.judge_error)
    assert _failures(registry, "route") == 1.0


async def test_a_router_that_chooses_leaves_the_run_clean(tmp_path: Path) -> None:
    provider = ScriptedProvider([], router=['{"target": "c", "reasoning": "fits"}'])
    result, events, state, _registry = await _run(
        tmp_path, _decide(), provider, functions=FUNCTIONS
    )
    assert (result.quality, result.path) == ("clean", ["a", "c"])
    assert state.judge_failures == {}
    assert of([e.body for e in events], EdgeTaken)[0].judge_error is None


def _scored(evaluator: ScriptedProvider) -> tuple[GraphSpec, dict[str, Any]]:
    goal = Goal(
        description="Log the hours.",
        success_criteria=[
            SuccessCriterion(id="hours", description="Hours logged", expression="a == 1"),
            SuccessCriterion(id="tone", description="The summary reads well"),
        ],
        evaluator="critic",
    )
    g = graph([fn("a")], goal=goal)
    return g, {"functions": {"a": lambda i: {"a": 1}}, "providers": {"critic": evaluator}}


@pytest.mark.parametrize(
    ("answer", "why"),
    [(ProviderError("critic", "model not found", status=404), "model not found"),
     ("I would rather not say.", "gave no score")],
    ids=["call failed", "no score"],
)  # fmt: skip
async def test_a_goal_criterion_the_evaluator_failed_to_score_leaves_the_run_degraded(
    tmp_path: Path, answer: Any, why: str
) -> None:
    g, options = _scored(ScriptedProvider([answer], name="critic"))
    result, events, state, registry = await _run(tmp_path, g, ScriptedProvider([]), **options)
    # The graph completed, and the expression criterion scored; the evaluator's did not.
    assert result.status == "completed" and result.goal_outcome is not None
    hours, tone = result.goal_outcome.criteria
    assert hours.error is None and hours.score == 1.0
    assert tone.method == "unscored" and tone.error is not None and why in tone.error
    assert result.quality == "degraded"
    assert state.judge_failures == {"goal": 1}
    [kept] = state.judge_failure_reasons
    assert (kept.kind, kept.node_id) == ("goal", None)
    assert kept.reason.startswith("criterion tone: ") and why in kept.reason
    [finished] = [e for e in events if isinstance(e.body, RunFinished)]
    assert finished.body.quality == "degraded"
    assert why in describe_event(finished)[2]
    assert "judge failures: 1 (1 goal)" in render_timeline(events, None)
    assert _failures(registry, "goal") == 1.0
    assert _failures(registry, "judge") == 0.0


async def test_a_goal_the_evaluator_scored_leaves_the_run_clean(tmp_path: Path) -> None:
    critic = ScriptedProvider(['{"score": 0.9, "reasoning": "reads well"}'], name="critic")
    g, options = _scored(critic)
    result, _events, state, registry = await _run(tmp_path, g, ScriptedProvider([]), **options)
    assert result.goal_outcome is not None and result.goal_outcome.score == pytest.approx(0.95)
    assert (result.status, result.quality) == ("completed", "clean")
    assert state.judge_failures == {} and state.judge_failure_reasons == []
    assert _failures(registry, "goal") == 0.0


async def test_a_goal_without_an_evaluator_is_unscored_but_no_judge_failure(
    tmp_path: Path,
) -> None:
    goal = Goal(description="x", success_criteria=["Reads well"])
    g = graph([fn("a")], goal=goal)
    result, _events, state, _registry = await _run(
        tmp_path, g, ScriptedProvider([]), functions={"a": lambda i: {"a": 1}}
    )
    assert result.goal_outcome is not None
    assert result.goal_outcome.criteria[0].method == "unscored"
    assert result.goal_outcome.criteria[0].error is None
    assert (result.quality, state.judge_failures) == ("clean", {})
