"""Input at the edges of a run's walk.

Input given while the run's goal is scored is refused, with a clear error, never taken and
dropped: scoring reads memory as the run ended, so input recorded then would be scored
against stale memory. And input that answers a client-facing node's ask reaches its model
when the log holds the ask (its waiting RETRY) and not the run's pause for it: a fork at
that verdict, or a resume after the run was interrupted between the two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from runtime import (
    Goal,
    GraphSpec,
    NodeSpec,
    RetryPolicy,
    RunChangedError,
    RunStateError,
    Runtime,
)
from runtime.events import (
    InputInjected,
    LlmTurn,
    MessageAdded,
    RunFinished,
    RunPaused,
    RunResumed,
    Verdict,
    fold,
)
from runtime.providers._base import LlmRequest
from runtime.spec import SuccessCriterion
from runtime.testing import ScriptedProvider, linear_graph, reply
from tests.runtime.gated import GatedProvider

pytestmark = pytest.mark.anyio

SCORE = '{"score": 0.9, "reasoning": "it reads well"}'

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


def _scored_graph() -> GraphSpec:
    return GraphSpec(
        id="summary",
        goal=GOAL,
        nodes=[NodeSpec(id="write", function="write", output_keys=["written"])],
        entry_node="write",
        retry=RetryPolicy(max_attempts=1),
    )


async def test_input_while_the_goal_is_scored_is_refused_and_the_run_ends_as_scored(
    tmp_path: Path,
) -> None:
    evaluator = GatedProvider(SCORE)
    with anyio.fail_after(60):
        async with Runtime(
            tmp_path / "runs.db", functions={"write": _write}, providers={"critic": evaluator}
        ) as rt:
            handle = await rt.start(_scored_graph())
            await evaluator.asked.wait()
            with pytest.raises(RunChangedError) as refused:
                await rt.inject_input(handle.run_id, {"extra": 1})
            evaluator.release.set()
            result = await handle.result()
            # Once the run has finished, input is refused as for any finished run.
            with pytest.raises(RunChangedError, match="already completed"):
                await rt.inject_input(handle.run_id, {"extra": 2})
            events = [e.body for e in await rt.read_events(handle.run_id)]
    error = refused.value
    assert (error.run_id, error.status) == (handle.run_id, "running")
    assert "its goal is being scored" in str(error) and "\n" not in str(error)
    assert result.status == "completed" and result.memory == {"written": True}
    assert result.goal_outcome is not None and result.goal_outcome.met
    assert not [e for e in events if isinstance(e, InputInjected)]
    assert isinstance(events[-1], RunFinished)


def _gated_graph() -> GraphSpec:
    return linear_graph(["draft", "send"], pause_nodes=["send"])


FUNCTIONS = {"draft": lambda inputs: {"draft": "hi"}, "send": lambda inputs: {"sent": True}}


async def test_input_given_while_the_runs_pause_is_recorded_lands_after_the_pause(
    tmp_path: Path,
) -> None:
    recording = anyio.Event()
    release = anyio.Event()

    async def hold_the_pause(run_id: str, last_seq: int, bodies: Any) -> None:
        if any(isinstance(b, RunPaused) for b in bodies):
            recording.set()
            await release.wait()

    with anyio.fail_after(60):
        async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, hooks=[hold_the_pause]) as rt:
            handle = await rt.start(_gated_graph())
            await recording.wait()  # the run's pause is committed, its hook still runs
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.inject_input, handle.run_id, {"note": "urgent"})
                await anyio.wait_all_tasks_blocked()
                release.set()
            paused = await handle.result()
            state = await rt.get_state(handle.run_id)
            events = [e.body for e in await rt.read_events(handle.run_id)]
    assert (paused.status, paused.resume_at) == ("paused", ["send"])
    # Recorded after the pause, as input given to a paused run is.
    assert state.memory["note"] == "urgent"
    assert [type(e) for e in events[-2:]] == [RunPaused, InputInjected]


async def test_input_from_a_hook_of_the_runs_pause_is_refused_not_waited_for(
    tmp_path: Path,
) -> None:
    refused: list[BaseException] = []

    async def inject_at_the_pause(run_id: str, last_seq: int, bodies: Any) -> None:
        if any(isinstance(b, RunPaused) for b in bodies):
            try:
                await rt.inject_input(run_id, {"note": "urgent"})
            except RunStateError as exc:
                refused.append(exc)

    with anyio.fail_after(60):
        async with Runtime(
            tmp_path / "runs.db", functions=FUNCTIONS, hooks=[inject_at_the_pause]
        ) as rt:
            handle = await rt.start(_gated_graph())
            paused = await handle.result()
            events = [e.body for e in await rt.read_events(handle.run_id)]
    assert paused.status == "paused" and "note" not in paused.memory
    [error] = refused
    assert "commit hook" in str(error) and "\n" not in str(error)
    assert not [e for e in events if isinstance(e, InputInjected)]


# -- a client-facing node's ask, without its pause ------------------------------------------


def _chat_graph() -> GraphSpec:
    node = NodeSpec(id="chat", kind="llm", client_facing=True, max_iterations=2)
    return GraphSpec(id="g", nodes=[node], entry_node="chat")


def _chat(request: LlmRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages]


async def _asked(db: Path) -> tuple[str, list[Any], int]:
    """A run whose chat node asked its user: its id, its events, and the seq of the RETRY
    that made the node wait (the event before its ``run.paused``)."""
    first = ScriptedProvider([reply("Hello! Where do you want to go?")])
    async with Runtime(db, provider=first) as rt:
        handle = await rt.start(_chat_graph())
        paused = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    assert (paused.status, paused.paused_reason) == ("paused", "input")
    assert isinstance(events[-1], RunPaused) and isinstance(events[-2], Verdict)
    assert events[-2].action == "retry"
    return handle.run_id, events, len(events) - 1


def _answered(provider: ScriptedProvider, events: list[Any], result: Any) -> None:
    assert provider.calls == 1, "the node asked for input again instead of answering"
    assert _chat(provider.requests[0])[-2:] == [
        ("assistant", "Hello! Where do you want to go?"),
        ("user", "[User input]\n- message: Lisbon"),
    ]
    assert [m.kind for m in events if isinstance(m, MessageAdded)].count("input") == 1
    assert [t.text for t in events if isinstance(t, LlmTurn)][-1] == "Lisbon is lovely in May."
    assert result.status == "completed" and result.memory["message"] == "Lisbon"


async def test_a_fork_at_the_ask_of_a_client_facing_node_shows_its_input_to_the_model(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    run_id, _events, ask = await _asked(db)
    second = ScriptedProvider([reply("Lisbon is lovely in May.")])
    with anyio.fail_after(60):
        async with Runtime(db, provider=second) as rt:
            fork = await rt.fork(run_id, ask, input={"message": "Lisbon"})
            result = await fork.result()
            forked = [e.body for e in await rt.read_events(fork.run_id)]
            assert (await rt.store.verify(fork.run_id)).ok  # type: ignore[union-attr]
    _answered(second, forked, result)


async def test_a_resume_with_input_after_a_crash_between_the_ask_and_its_pause_answers_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    _run_id, events, ask = await _asked(db)
    second = ScriptedProvider([reply("Lisbon is lovely in May.")])
    with anyio.fail_after(60):
        async with Runtime(db, provider=second) as rt:
            assert rt.store is not None
            # The log of a run whose process died after the node's RETRY was committed and
            # before the run's pause was.
            await rt.store.append("crashed", events[:ask], expected_seq=0)
            handle = await rt.resume("crashed", input={"message": "Lisbon"})
            result = await handle.result()
            stored = await rt.read_events("crashed")
    resumed = [e.body for e in stored]
    _answered(second, resumed, result)
    # The resume names the node its input answers; an older log's resume, which names
    # none, folds as it did: the input is not shown to the node.
    at = next(i for i, e in enumerate(stored) if isinstance(e.body, RunResumed))
    assert stored[at].body == RunResumed(input_for="chat")
    assert isinstance(stored[at + 1].body, InputInjected)
    older = [*stored[:at], msgspec.structs.replace(stored[at], body=RunResumed())]
    older.append(stored[at + 1])
    assert fold(stored[: at + 2]).visits["chat"].injected == {"message": "Lisbon"}
    assert fold(older).visits["chat"].injected == {}
