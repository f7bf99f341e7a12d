"""Scoring a run's goal (a model call for the criteria an evaluator scores) runs beside
the executor, so a cancel, a pause or closing the runtime reach the run at once. A cancel
then records the end the graph reached, unscored (``goal_outcome`` None): the run did
reach it, so there is nothing to resume. An evaluator that raises is a criterion left
unscored (the run degraded), never a failed run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    Goal,
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    RetryPolicy,
    RunStateError,
    Runtime,
)
from runtime.events import RunCancelled, RunFinished, RunPaused
from runtime.spec import SuccessCriterion
from tests.runtime.gated import GatedProvider

pytestmark = pytest.mark.anyio


#: The gated evaluator's answer: every criterion scores 0.9.
SCORE = '{"score": 0.9, "reasoning": "it reads well"}'


class BrokenEvaluator:
    """An evaluator with a bug: it raises something other than a ProviderError."""

    name = "broken"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise RuntimeError("the evaluator has a bug")


GOAL = Goal(
    description="Write a summary.",
    success_criteria=[
        SuccessCriterion(id="written", description="A summary exists", expression="written"),
        SuccessCriterion(id="reads_well", description="The summary reads well"),
    ],
    evaluator="critic",
)


def _write(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"written": True}


def _fail(inputs: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("no paper")


def _graph() -> GraphSpec:
    return GraphSpec(
        id="summary",
        goal=GOAL,
        nodes=[NodeSpec(id="write", function="write", output_keys=["written"])],
        entry_node="write",
        retry=RetryPolicy(max_attempts=1),
    )


def _finished(events: list[Any]) -> list[RunFinished]:
    return [e.body for e in events if isinstance(e.body, RunFinished)]


@pytest.mark.parametrize(
    ("write", "status", "error"),
    [(_write, "completed", None), (_fail, "failed", "node 'write' failed: RuntimeError: no paper")],
)
async def test_cancel_while_the_goal_is_scored_records_the_end_unscored_at_once(
    tmp_path: Path, write: Any, status: str, error: str | None
) -> None:
    evaluator = GatedProvider(SCORE)
    with anyio.fail_after(60):
        async with Runtime(
            tmp_path / "runs.db", functions={"write": write}, providers={"critic": evaluator}
        ) as rt:
            handle = await rt.start(_graph())
            await evaluator.asked.wait()
            await rt.cancel(handle.run_id, reason="stop")
            result = await handle.result()
            # The run ended while the model still had not answered.
            assert not evaluator.release.is_set()
            state = await rt.get_state(handle.run_id)
            events = await rt.read_events(handle.run_id)
            with pytest.raises(RunStateError):
                await rt.resume(handle.run_id)  # the run reached its end: nothing to run
    assert result.status == state.status == status
    assert result.error == state.error == error
    assert result.goal_outcome is None and state.goal_outcome is None
    assert [(f.status, f.goal_outcome) for f in _finished(events)] == [(status, None)]
    assert isinstance(events[-1].body, RunFinished)
    assert not [e for e in events if isinstance(e.body, RunCancelled)]
    assert evaluator.calls == 1


async def test_closing_the_runtime_while_the_goal_is_scored_records_the_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    evaluator = GatedProvider(SCORE)
    with anyio.fail_after(60):
        async with Runtime(
            path, functions={"write": _write}, providers={"critic": evaluator}
        ) as rt:
            handle = await rt.start(_graph())
            await evaluator.asked.wait()
        result = await handle.result()
    assert not evaluator.release.is_set()
    async with Runtime(path, functions={"write": _write}) as rt:
        state = await rt.get_state(handle.run_id)
        events = await rt.read_events(handle.run_id)
    # The executor recorded the end itself: a run that did not stop in time would be
    # recorded cancelled from its committed log instead.
    assert result.status == state.status == "completed"
    assert result.goal_outcome is None and state.goal_outcome is None
    assert [f.status for f in _finished(events)] == ["completed"]
    assert not [e for e in events if isinstance(e.body, RunCancelled)]


async def test_a_pause_while_the_goal_is_scored_has_no_node_left_to_stop_at(
    tmp_path: Path,
) -> None:
    evaluator = GatedProvider(SCORE)
    with anyio.fail_after(60):
        async with Runtime(
            tmp_path / "runs.db", functions={"write": _write}, providers={"critic": evaluator}
        ) as rt:
            handle = await rt.start(_graph())
            await evaluator.asked.wait()
            await rt.pause(handle.run_id)  # handled before the score arrives (mailbox order)
            evaluator.release.set()
            result = await handle.result()
            events = await rt.read_events(handle.run_id)
    assert result.status == "completed"
    assert result.goal_outcome is not None
    assert result.goal_outcome.met is True
    assert [c.score for c in result.goal_outcome.criteria] == [1.0, 0.9]
    recorded = _finished(events)[0].goal_outcome
    assert recorded is not None and recorded["score"] == result.goal_outcome.score
    assert not [e for e in events if isinstance(e.body, RunPaused)]


async def test_an_evaluator_with_a_bug_leaves_its_criterion_unscored_not_the_run_failed(
    tmp_path: Path,
) -> None:
    # The scorecard is measurement only: an evaluator that raises something other than a
    # ProviderError is a check that did not run (the run "degraded"), never a failed run.
    path = tmp_path / "runs.db"
    with anyio.fail_after(60):
        async with Runtime(
            path, functions={"write": _write}, providers={"critic": BrokenEvaluator()}
        ) as rt:
            handle = await rt.start(_graph())
            result = await handle.result()
    async with Runtime(path, functions={"write": _write}) as rt:
        state = await rt.get_state(handle.run_id)
        events = await rt.read_events(handle.run_id)
    error = "the evaluator failed: RuntimeError: the evaluator has a bug"
    assert result.status == state.status == "completed"
    assert result.quality == state.quality == "degraded"
    assert result.error is None and state.error is None
    assert result.memory == state.memory == {"written": True}
    assert result.goal_outcome is not None
    assert [(c.id, c.score, c.error) for c in result.goal_outcome.criteria] == [
        ("written", 1.0, None),
        ("reads_well", None, error),
    ]
    [finished] = _finished(events)
    assert finished.status == "completed" and finished.goal_outcome is not None
    assert finished.goal_outcome["criteria"][1]["error"] == error
