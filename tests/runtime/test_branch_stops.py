"""Parallel branches act on stop reasons as the node's own turns do (one rule, in
``runtime.providers._base``): a refusal fails the branch at once with the model's text, a
turn cut at the token cap is asked once more with a larger cap and then fails as
truncated, and a tool call cut at the cap never runs; the branch judge's call too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import LlmRequest, LlmResponse, Runtime, ScriptedProvider, tool
from runtime.events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
    LlmTurn,
    NodeFailed,
)
from runtime.testing import reply, tool_call

from .test_parallel import QUESTION, answering, parallel_graph
from .test_provider_stops import cut

pytestmark = pytest.mark.anyio

NO = LlmResponse(text="I can't help with that.", stop="refusal", stop_reason="refusal")


async def _run(
    path: Path, providers: dict[str, Any], strategy: str = "llm_judge", **options: Any
) -> tuple[Any, list[Any], Any]:
    async with Runtime(path, provider=ScriptedProvider([]), providers=providers, **options) as rt:
        result = await (
            await rt.start(parallel_graph(strategy), input={"question": QUESTION})
        ).result()
        events = await rt.read_events(result.run_id)
        state = await rt.get_state(result.run_id)
    return result, events, state


def _finished(events: list[Any]) -> dict[str, BranchFinished]:
    return {e.body.label: e.body for e in events if isinstance(e.body, BranchFinished)}


async def test_a_refusing_branch_fails_at_once_with_the_refusal(tmp_path: Path) -> None:
    refusing = ScriptedProvider([NO] * 5, name="p0")
    providers = {"p0": refusing, "p1": answering("Paris"), "p2": answering("Nice")}
    judge = ScriptedProvider(["Response 1"], name="judge")
    result, events, _state = await _run(tmp_path / "r.db", {**providers, "judge": judge})
    assert result.status == "completed" and result.memory["answer"] == "Paris"
    assert refusing.calls == 1  # not asked again up to max_turns
    b0 = _finished(events)["b0"]
    assert not b0.ok and b0.error == "the model refused: I can't help with that."
    [turn] = [e.body for e in events if isinstance(e.body, BranchTurn) and e.body.branch == 0]
    assert turn.stop == "refusal"  # the refusal is a fact of the round
    selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
    assert selected.candidates == [1, 2]
    # The winner's turns keep their stop reasons when they become the node's.
    assert [e.body.stop for e in events if isinstance(e.body, LlmTurn)] == ["tool_use", "end"]


async def test_when_every_branch_refuses_the_node_fails_naming_the_refusal(
    tmp_path: Path,
) -> None:
    providers = {f"p{i}": ScriptedProvider([NO] * 5, name=f"p{i}") for i in range(3)}
    result, events, _state = await _run(tmp_path / "r.db", providers, "first_success")
    assert result.status == "failed"
    [failed] = [e.body for e in events if isinstance(e.body, NodeFailed)]
    assert failed.error_type == "BranchesFailed"
    assert "b0: the model refused: I can't help with that." in failed.error
    assert all(p.calls == 1 for p in providers.values())


async def test_a_cut_branch_turn_is_asked_again_and_its_cut_call_never_runs(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    @tool
    def search(query: str) -> str:
        """Search."""
        ran.append(query)
        return "found"

    half = cut("", tool_call("search", query="half"))
    p0 = ScriptedProvider(
        [half, reply("", tool_call("set_output", key="answer", value="Paris")), reply("Paris")],
        name="p0",
    )
    providers = {"p0": p0, "p1": answering("Lyon"), "p2": answering("Nice")}
    judge = ScriptedProvider(["Response 1"], name="judge")
    result, events, _state = await _run(
        tmp_path / "c.db", {**providers, "judge": judge}, tools=[search]
    )
    assert result.status == "completed" and result.memory["answer"] == "Paris"
    assert ran == []  # the call cut at the cap never ran
    assert not [
        e for e in events if isinstance(e.body, BranchToolResult) and e.body.name == "search"
    ]
    first, again = p0.requests[:2]
    assert first.max_tokens is None and again.max_tokens is not None and again.max_tokens >= 8192
    turns = [e.body for e in events if isinstance(e.body, BranchTurn) and e.body.branch == 0]
    assert [t.stop for t in turns] == ["tool_use", "end"]  # the cut answer is no turn
    assert _finished(events)["b0"].ok


async def test_a_branch_turn_cut_twice_fails_the_branch_as_truncated(tmp_path: Path) -> None:
    p0 = ScriptedProvider([cut("The answer is"), cut("The answer", tokens=8192)], name="p0")
    providers = {"p0": p0, "p1": answering("Paris"), "p2": answering("Nice")}
    judge = ScriptedProvider(["Response 1"], name="judge")
    result, events, _state = await _run(tmp_path / "t.db", {**providers, "judge": judge})
    assert result.status == "completed" and result.memory["answer"] == "Paris"
    b0 = _finished(events)["b0"]
    assert not b0.ok and b0.error == "TruncatedError: p0: truncated at 8192 tokens"
    # The cut turn is recorded, as a node's is: both calls were paid for.
    [turn] = [e.body for e in events if isinstance(e.body, BranchTurn) and e.body.branch == 0]
    assert (turn.stop, turn.tool_calls, turn.output_tokens) == ("max_tokens", [], 4096 + 8192)


@pytest.mark.parametrize(
    "answers",
    [[NO], [cut("Response"), cut("Resp", tokens=8192)]],
    ids=["refused", "truncated"],
)
async def test_a_branch_judge_that_refuses_or_is_cut_is_a_judge_failure(
    tmp_path: Path, answers: list[LlmResponse]
) -> None:
    providers = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    judge = ScriptedProvider(answers, name="judge")
    result, events, state = await _run(tmp_path / "j.db", {**providers, "judge": judge})
    assert result.status == "completed" and result.quality == "degraded"
    judged = next(e.body for e in events if isinstance(e.body, BranchesJudged))
    assert judged.text == "" and judged.error is not None
    assert ("refused" in judged.error) or ("truncated at 8192 tokens" in judged.error)
    assert state.judge_failures == {"branch_judge": 1}
    selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
    assert selected.winner == 0 and "fallback" in selected.reason


def _answers_paris(request: LlmRequest) -> LlmResponse:
    if any(m.role == "tool" for m in request.messages):
        return reply("Paris")
    return reply("", tool_call("set_output", key="answer", value="Paris"))


async def test_a_refusal_recorded_before_a_crash_fails_its_branch_without_asking_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.db"
    refusing = ScriptedProvider([NO], name="p0")
    providers = {"p0": refusing, "p1": answering("Paris"), "p2": answering("Nice")}
    judge = ScriptedProvider(["Response 1"], name="judge")
    _result, events, _state = await _run(path, {**providers, "judge": judge}, "first_success")
    [refused] = [e for e in events if isinstance(e.body, BranchTurn) and e.body.stop == "refusal"]
    # A fork at the refused turn resumes the round as a restart after a crash there would.
    again = ScriptedProvider([], name="p0")
    others = {f"p{i}": ScriptedProvider(_answers_paris, name=f"p{i}") for i in (1, 2)}
    async with Runtime(
        path, provider=ScriptedProvider([]), providers={"p0": again, **others, "judge": judge}
    ) as rt:
        fork = await rt.fork(refused.run_id, refused.seq)
        result = await fork.result()
        forked = await rt.read_events(fork.run_id)
    assert result.status == "completed" and result.memory["answer"] == "Paris"
    assert again.calls == 0
    b0 = _finished(forked[refused.seq :])["b0"]
    assert not b0.ok and b0.error == "the model refused: I can't help with that."
