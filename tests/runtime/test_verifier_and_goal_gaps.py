"""Verifier nodes and the goal scorecard at their edges: an evaluator's absurd reply, an
evaluator with a bug, a typo in an expression that only the end of a run would read,
and a node rubric (``success_criteria``) on a node that nothing judges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import (
    EdgeSpec,
    Goal,
    GraphSpec,
    NodeSpec,
    Runtime,
    ScriptedProvider,
    SpecErrors,
    validate_graph,
)
from runtime.events import NodeFailed, VerificationRecorded
from runtime.spec import Constraint, ExpressionVerifier, LlmJudgeVerifier, SuccessCriterion
from runtime.testing import assert_replays, function_node

pytestmark = pytest.mark.anyio

#: A JSON score no float holds: ``float()`` of it raises OverflowError.
HUGE_SCORE = '{"score": ' + "9" * 400 + ', "reasoning": "off the scale"}'
FUNCTIONS = {
    "write": lambda inputs: {"draft": "The kettle boils."},
    "done": lambda inputs: {"done": True},
}


def checked_graph(verifier: Any, goal: Goal | None = None) -> GraphSpec:
    """write -> check -> (passed: publish | otherwise: redo)."""
    return GraphSpec(
        id="checked",
        goal=goal,
        entry_node="write",
        terminal_nodes=["publish", "redo"],
        nodes=[
            function_node("write", output_keys=["draft"]),
            NodeSpec(
                id="check",
                kind="verifier",
                input_keys=["draft"],
                output_keys=["check_verification", "check_verification_passed"],
                verifier=verifier,
            ),
            function_node("publish", "done", output_keys=["done"]),
            function_node("redo", "done", output_keys=["done"]),
        ],
        edges=[
            EdgeSpec(source="write", target="check"),
            EdgeSpec(
                source="check",
                target="publish",
                condition="conditional",
                expression="check_verification_passed",
            ),
            EdgeSpec(source="check", target="redo", condition="always"),
        ],
    )


JUDGED = LlmJudgeVerifier(target_key="draft", evaluation_criteria="Clear.", evaluator="critic")


@pytest.mark.parametrize(
    ("answer", "score", "passed"),
    [
        (HUGE_SCORE, None, False),
        ("I'd say 1 out of 10.", 0.1, False),  # not a full score of 1
        ("9 out of 10", 0.9, True),
    ],
)
async def test_an_evaluator_reply_off_the_scale_is_a_failed_verification_not_a_crash(
    tmp_path: Path, answer: str, score: float | None, passed: bool
) -> None:
    critic = ScriptedProvider([answer], name="critic")
    async with Runtime(
        tmp_path / "runs.db", functions=FUNCTIONS, providers={"critic": critic}
    ) as rt:
        result = await (await rt.start(checked_graph(JUDGED))).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
        await assert_replays(rt, result.run_id)
    assert not [b for b in events if isinstance(b, NodeFailed)]
    # A reply with no score is a check that did not run: a judge failure, so degraded.
    assert result.status == "completed"
    assert result.quality == ("degraded" if score is None else "clean")
    verification = result.memory["check_verification"]
    assert verification["score"] == score and verification["passed"] is passed
    assert result.path[-1] == ("publish" if passed else "redo")
    [recorded] = [b for b in events if isinstance(b, VerificationRecorded)]
    assert recorded.reply == answer
    if score is None:
        assert "outside 0..1" in verification["reasoning"]


async def test_a_goal_evaluator_reply_off_the_scale_never_fails_the_run(tmp_path: Path) -> None:
    goal = Goal(description="Boil water.", success_criteria=["It reads well"], evaluator="critic")
    critic = ScriptedProvider([HUGE_SCORE], name="critic")
    graph = checked_graph(ExpressionVerifier(expression="len(draft) > 3"), goal)
    async with Runtime(
        tmp_path / "runs.db", functions=FUNCTIONS, providers={"critic": critic}
    ) as rt:
        result = await (await rt.start(graph)).result()
        state = await rt.get_state(result.run_id)
    # Measurement only: the status stays what the graph made it; the unscored criterion
    # is a check that did not run, so the run is degraded.
    assert result.status == state.status == "completed"
    assert result.quality == state.quality == "degraded"
    assert result.error is None
    assert result.goal_outcome is not None
    [criterion] = result.goal_outcome.criteria
    assert criterion.score is None and criterion.error is not None
    assert "outside 0..1" in criterion.error


def _refused(graph: GraphSpec) -> dict[str, str]:
    with pytest.raises(SpecErrors) as caught:
        validate_graph(graph)
    return {e.path: e.reason for e in caught.value.errors}


def test_a_typo_in_a_goal_expression_is_refused_before_the_run() -> None:
    goal = Goal(
        description="Boil water.",
        success_criteria=[
            SuccessCriterion(
                id="ok", description="Checked", expression="check_verification_passed"
            ),
            SuccessCriterion(id="few", description="Few steps", expression="run['steps'] < 9"),
            SuccessCriterion(id="typo", description="Long", expression="len(drafts) > 3"),
        ],
        constraints=[Constraint(description="Short", expression="len(draft) < n_max")],
    )
    errors = _refused(checked_graph(ExpressionVerifier(expression="len(draft) > 3"), goal))
    assert set(errors) == {"goal.success_criteria[2].expression", "goal.constraints[0].expression"}
    assert "'drafts'" in errors["goal.success_criteria[2].expression"]
    assert "'n_max'" in errors["goal.constraints[0].expression"]
    # Declared, the names are fine (memory, goal and run are always there).
    fixed = Goal(
        description="Boil water.",
        success_criteria=[SuccessCriterion(description="Long", expression="len(draft) > 3")],
        constraints=[Constraint(description="Known", expression="memory and goal and run")],
    )
    validate_graph(checked_graph(ExpressionVerifier(expression="len(draft) > 3"), fixed))


def test_a_verifier_expression_reading_a_key_its_node_does_not_read_is_refused() -> None:
    errors = _refused(checked_graph(ExpressionVerifier(expression="len(drat) > 3")))
    assert list(errors) == ["nodes[1].verifier.expression"]
    assert "'drat'" in errors["nodes[1].verifier.expression"]
    assert "input_keys" in errors["nodes[1].verifier.expression"]
    validate_graph(checked_graph(ExpressionVerifier(expression="len(memory['draft']) > goal")))


@pytest.mark.parametrize("kind", ["function", "verifier"])
def test_success_criteria_on_a_node_nothing_judges_is_refused(kind: str) -> None:
    graph = checked_graph(ExpressionVerifier(expression="len(draft) > 3"))
    nodes = list(graph.nodes)
    index = 0 if kind == "function" else 1
    nodes[index] = NodeSpec(**{**_fields(nodes[index]), "success_criteria": ["The draft is clear"]})
    graph = GraphSpec(**{**_fields(graph), "nodes": nodes})
    errors = _refused(graph)
    assert list(errors) == [f"nodes[{index}].success_criteria"]
    assert "only llm nodes" in errors[f"nodes[{index}].success_criteria"]


def _fields(spec: Any) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__struct_fields__}
