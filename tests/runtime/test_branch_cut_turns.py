"""A parallel branch's turn cut at the token cap twice is no answer, but both of its calls
were paid for: the branch records it (``branch.turn`` with the ``max_tokens`` stop, the
tokens of both calls, no tool calls) and ends, not ok, with the TruncatedError, as a
node's turn does; its tokens reach the branch's end, the metrics and a replay, which
serves each recorded branch turn with its recorded stop (a cut or a refusal fails the
branch again, as it did)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtime import LlmResponse, Runtime, RuntimeMetrics, ScriptedProvider, Usage
from runtime.events import BranchesSelected, BranchFinished, BranchTurn

from .replay_graphs import Failing, offline
from .test_parallel import QUESTION, answering, parallel_graph

pytestmark = pytest.mark.anyio


def cut(text: str, *, given: int, written: int) -> LlmResponse:
    usage = Usage(input_tokens=given, output_tokens=written, input_cached=given // 2)
    return LlmResponse(text=text, usage=usage, stop="max_tokens", stop_reason="length", model="m")


def twice_cut() -> ScriptedProvider:
    return ScriptedProvider(
        [
            cut("The capital", given=100, written=4096),
            cut("The capital is", given=101, written=8192),
        ],
        name="p0",
    )


NO = LlmResponse(text="I can't help with that.", stop="refusal", stop_reason="refusal")


async def _record(path: Path, p0: ScriptedProvider, **options: Any) -> tuple[Any, list[Any]]:
    providers = {"p0": p0, "p1": answering("Paris", name="p1"), "p2": answering("Nice")}
    async with Runtime(path, provider=ScriptedProvider([]), providers=providers, **options) as rt:
        graph = parallel_graph("first_success")
        result = await (await rt.start(graph, input={"question": QUESTION})).result()
        events = await rt.read_events(result.run_id)
    return result, events


def _b0(events: list[Any]) -> tuple[list[BranchTurn], BranchFinished]:
    bodies = [e.body for e in events]
    turns = [b for b in bodies if isinstance(b, BranchTurn) and b.branch == 0]
    [finished] = [b for b in bodies if isinstance(b, BranchFinished) and b.branch == 0]
    return turns, finished


async def test_a_branch_turn_cut_twice_is_recorded_with_its_tokens_and_fails_the_branch(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    result, events = await _record(tmp_path / "r.db", twice_cut(), metrics=RuntimeMetrics(registry))
    assert result.status == "completed" and result.memory["answer"] in ("Paris", "Nice")
    # Before, the cut turn left no branch.turn: its 12288 output tokens were nowhere.
    [turn], finished = _b0(events)
    assert (turn.stop, turn.text, turn.tool_calls) == ("max_tokens", "The capital is", [])
    assert (turn.input_tokens, turn.output_tokens, turn.input_cached) == (201, 12288, 100)
    assert not finished.ok and finished.error == "TruncatedError: p0: truncated at 8192 tokens"
    assert (finished.turns, finished.input_tokens, finished.output_tokens) == (1, 201, 12288)
    seqs = {id(e.body): e.seq for e in events}
    assert seqs[id(turn)] < seqs[id(finished)]
    selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
    assert 0 not in selected.candidates
    sample = registry.get_sample_value
    # The two answering branches wrote 10 tokens each on their last turn.
    assert sample("magistrate_llm_tokens_total", {"direction": "output"}) == 12288 + 20
    assert sample("magistrate_llm_tokens_total", {"direction": "input_cached"}) == 100


@pytest.mark.parametrize(
    "p0", [twice_cut, lambda: ScriptedProvider([NO], name="p0")], ids=["cut", "refused"]
)
async def test_a_branch_that_was_cut_or_refused_replays_equal(tmp_path: Path, p0: Any) -> None:
    db = tmp_path / "r.db"
    result, events = await _record(db, p0())
    [turn], finished = _b0(events)
    assert not finished.ok and turn.stop in ("max_tokens", "refusal")
    async with offline(db, Failing()) as rt:
        report = await rt.replay(result.run_id)
    # Before, a recorded branch turn was served with a stop guessed from its tool calls
    # ("end"): the cut or refused turn became an answer, and the branch finished ok.
    assert report.equal, report.summary()
    assert report.stopped is None


async def test_a_branch_turn_cut_twice_recorded_before_a_crash_fails_without_asking_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    first, events = await _record(db, twice_cut())
    [cut_at] = [e for e in events if isinstance(e.body, BranchTurn) and e.body.branch == 0]
    again = ScriptedProvider([], name="p0")  # a call would exhaust it and fail otherwise
    providers = {"p0": again, "p1": answering("Paris"), "p2": answering("Nice")}
    # A fork at the cut turn resumes the round as a restart after a crash there would.
    async with Runtime(db, provider=ScriptedProvider([]), providers=providers) as rt:
        fork = await rt.fork(first.run_id, cut_at.seq)
        result = await fork.result()
        forked = await rt.read_events(fork.run_id)
    assert result.status == "completed" and again.calls == 0
    _turns, finished = _b0(forked[cut_at.seq :])
    assert not finished.ok and finished.error is not None
    assert finished.error.startswith("TruncatedError: ")
    assert (finished.input_tokens, finished.output_tokens) == (201, 12288)
