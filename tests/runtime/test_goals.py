"""The goal scorecard and the run's quality figures, through the public API."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    EdgeSpec,
    Goal,
    GraphSpec,
    NodeSpec,
    ProviderError,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    SpecErrors,
    graph_from_dict,
)
from runtime.events import RunFinished, fold
from runtime.spec import Constraint, SuccessCriterion, graph_to_dict
from runtime.testing import function_node, reply, tool_call

pytestmark = pytest.mark.anyio

attempts: list[int] = []


def flaky(inputs: dict[str, Any]) -> dict[str, Any]:
    """Fails on its first attempt of each run, then reports 3 hours."""
    attempts.append(1)
    if len(attempts) % 2 == 1:
        raise RuntimeError("the timesheet service blinked")
    return {"hours": 3, "notes": "ok"}


GOAL = Goal(
    description="Log the day's hours.",
    success_criteria=[
        SuccessCriterion(id="hours", description="Hours logged", expression="hours == 3"),
        SuccessCriterion(
            description="Few retries", expression="run['total_retries'] == 0", weight=0.5
        ),
        SuccessCriterion(description="A fraction", expression="hours / 4", threshold=0.7),
        "The summary reads well",
    ],
    constraints=[
        Constraint(id="positive", description="No negative hours", expression="hours >= 0"),
        Constraint(description="No overtime", expression="hours > 8"),
        "Be polite",
    ],
    evaluator="critic",
)


def goal_graph(goal: Goal = GOAL) -> GraphSpec:
    return GraphSpec(
        id="hours",
        goal=goal,
        entry_node="log",
        nodes=[function_node("log", "flaky", output_keys=["hours", "notes"])],
        retry=RetryPolicy(max_attempts=2, initial_delay=0, jitter=0),
    )


async def test_the_scorecard_scores_each_criterion_and_is_recorded_in_run_finished() -> None:
    critic = ScriptedProvider(['{"score": 0.6, "reasoning": "terse"}'], name="critic")
    async with Runtime(None, functions={"flaky": flaky}, providers={"critic": critic}) as rt:
        result = await (await rt.start(goal_graph())).result()
        events = await rt.read_events(result.run_id)
    outcome = result.goal_outcome
    assert outcome is not None
    scores = {c.id: (c.method, c.score, c.met) for c in outcome.criteria}
    assert scores == {
        "hours": ("expression", 1.0, True),
        "criterion_1": ("expression", 0.0, False),  # one retry happened
        "criterion_2": ("expression", 0.75, True),
        "criterion_3": ("model", 0.6, False),
    }
    assert outcome.score == pytest.approx((1.0 + 0.0 * 0.5 + 0.75 + 0.6) / 3.5)
    held = {c.id: (c.method, c.held) for c in outcome.constraints}
    assert held == {
        "positive": ("expression", True),
        "constraint_1": ("expression", False),
        "constraint_2": ("unchecked", None),
    }
    assert outcome.met is False
    # Measurement only: the run itself is unaffected.
    assert result.status == "completed" and result.quality == "clean"
    finished = next(e.body for e in events if isinstance(e.body, RunFinished))
    assert finished.goal_outcome is not None and finished.goal_outcome["score"] == outcome.score
    assert fold(events).goal_outcome == finished.goal_outcome
    prompt = critic.requests[0].messages[0].content
    assert "The summary reads well" in prompt and '"hours": 3' in prompt
    assert critic.requests[0].purpose == "outcome"


async def test_without_an_evaluator_text_criteria_stay_unscored() -> None:
    goal = Goal(description="x", success_criteria=["Reads well", SuccessCriterion(
        description="Hours", expression="hours == 3")])  # fmt: skip
    async with Runtime(None, functions={"flaky": flaky}) as rt:
        result = await (await rt.start(goal_graph(goal))).result()
    assert result.goal_outcome is not None
    assert [c.method for c in result.goal_outcome.criteria] == ["unscored", "expression"]
    assert result.goal_outcome.score == 1.0 and result.goal_outcome.met is True


async def test_a_failing_evaluator_leaves_its_criterion_unscored_with_the_reason() -> None:
    critic = ScriptedProvider([ProviderError("critic", "down")], name="critic")  # type: ignore[list-item]
    goal = Goal(description="x", success_criteria=["Reads well"], evaluator="critic")
    async with Runtime(None, functions={"flaky": flaky}, providers={"critic": critic}) as rt:
        result = await (await rt.start(goal_graph(goal))).result()
    assert result.goal_outcome is not None
    (criterion,) = result.goal_outcome.criteria
    assert criterion.method == "unscored" and "down" in criterion.reasoning
    assert result.goal_outcome.score is None and result.goal_outcome.met is None


async def test_the_result_carries_retries_visits_iterations_and_verdict_counts() -> None:
    model = ScriptedProvider(
        [
            reply("Thinking about it."),  # Level 0: 'summary' missing -> RETRY
            reply("", tool_call("set_output", key="summary", value="3h")),
            reply("Done."),
        ]
    )
    graph = GraphSpec(
        id="stats",
        entry_node="log",
        nodes=[
            function_node("log", "flaky", output_keys=["hours", "notes"]),
            NodeSpec(id="summarise", kind="llm", output_keys=["summary"]),
        ],
        edges=[EdgeSpec(source="log", target="summarise")],
        retry=RetryPolicy(max_attempts=2, initial_delay=0, jitter=0),
    )
    async with Runtime(None, functions={"flaky": flaky}, provider=model) as rt:
        result = await (await rt.start(graph)).result()
        read_back = fold(await rt.read_events(result.run_id))
    assert result.total_retries == 1
    assert result.visits == {"log": 1, "summarise": 1}
    assert result.iterations == {"summarise": 3}
    # Level 0 RETRY on the text turn, the bail-out RETRY on the tool turn, then ACCEPT;
    # the state counts the judged ones and the tool turn apart.
    assert result.verdicts == {"summarise": {"retry": 2, "accept": 1}}
    assert result.tool_turns == {"summarise": 1}
    assert read_back.turns == result.iterations
    assert read_back.verdict_counts == {"summarise": {"retry": 1, "accept": 1}}
    assert read_back.tool_turns == result.tool_turns
    assert result.goal_outcome is None  # no goal, no scorecard


def test_goal_criteria_are_validated_naming_the_field() -> None:
    data = graph_to_dict(goal_graph())
    data["goal"]["success_criteria"][1]["expression"] = "lambda: 1"
    data["goal"]["success_criteria"][2]["threshold"] = 2
    data["goal"]["constraints"][0]["id"] = "constraint_1"
    with pytest.raises(SpecErrors) as info:
        graph_from_dict(data)
    paths = [e.path for e in info.value.errors]
    assert "goal.success_criteria[1].expression" in paths
    assert "goal.success_criteria[2].threshold" in paths
    assert "goal.constraints[1].id" in paths


async def test_an_unknown_goal_evaluator_is_refused_at_start() -> None:
    async with Runtime(None, functions={"flaky": flaky}) as rt:
        with pytest.raises(SpecErrors) as info:
            await rt.start(goal_graph())
    assert [e.path for e in info.value.errors] == ["goal.evaluator"]
