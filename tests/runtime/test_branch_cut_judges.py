"""The model calls that judge rather than work (the branch judge, a node's Level 2 judge,
an ``llm_decide`` router, an ``llm_judge`` verifier's evaluator, the goal's evaluator)
treat an answer cut at the token cap as a node's turn does: it is no answer, so it is
asked once more with a larger cap (``complete_uncut``), and a second cut is that
caller's own failure (a judge failure, a fallback route, a failed verifier attempt, an
unscored criterion), never a verdict read from half an answer; where the caller records
tokens, the cut call's are recorded. A run with such cuts replays equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import LlmResponse, ProviderError, Runtime, ScriptedProvider, Usage
from runtime.events import (
    BranchesJudged,
    EdgeTaken,
    NodeFailed,
    Verdict,
    VerificationRecorded,
)
from runtime.testing import reply, tool_call

from .replay_graphs import FUNCTIONS, Failing, Strict, offline, routed
from .test_llm_node import FAST, graph, llm, of, run_graph, set_output
from .test_parallel import QUESTION, answering, parallel_graph

pytestmark = pytest.mark.anyio


def cut(text: str, *, given: int = 50, written: int = 512) -> LlmResponse:
    usage = Usage(input_tokens=given, output_tokens=written)
    return LlmResponse(text=text, usage=usage, stop="max_tokens", stop_reason="length", model="m")


async def test_the_branch_judges_call_cut_twice_records_the_tokens_it_cost(
    tmp_path: Path,
) -> None:
    providers: dict[str, Any] = {
        f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])
    }
    providers["judge"] = ScriptedProvider(
        [cut("Response", given=300, written=600), cut("Response 2 is", given=301, written=8192)],
        name="judge",
    )
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider([]), providers=providers) as rt:
        result = await (await rt.start(parallel_graph(), input={"question": QUESTION})).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
    assert result.status == "completed" and result.quality == "degraded"
    [judged] = of(events, BranchesJudged)
    assert judged.text == "" and judged.error == "TruncatedError: judge: truncated at 8192 tokens"
    # Before, the failed call recorded 0 tokens though both calls were paid for.
    assert (judged.input_tokens, judged.output_tokens, judged.model) == (601, 8792, "m")


async def test_a_level_2_answer_cut_at_the_cap_is_asked_again_not_read(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["a concrete answer"])
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done"), reply("", set_output("a", "y")), "ok"],
        judge=[
            cut('{"verdict": "ACCEPT", "confidence": 0.9, "feedback": "'),
            '{"verdict": "RETRY", "confidence": 0.8, "feedback": "be concrete"}',
            '{"verdict": "ACCEPT", "confidence": 0.9}',
        ],
    )
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "completed" and result.memory == {"a": "y"}
    quality = [v for v in of(events, Verdict) if v.level == "quality"]
    # Before, the cut answer was read as a whole one: ACCEPT, and the node ended on "x".
    assert [(v.action, v.feedback) for v in quality] == [("retry", "be concrete"), ("accept", "")]
    first, again = provider.requests_for("judge")[:2]
    assert again.max_tokens is not None and again.max_tokens >= 8192 > (first.max_tokens or 0)


async def test_a_level_2_answer_cut_twice_is_a_judge_failure(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["a concrete answer"])
    half = cut('{"verdict": "RETRY", "confidence": 0.9, "feedback": "more', written=8192)
    provider = ScriptedProvider([reply("", set_output("a", "x")), reply("done")], judge=[half] * 6)
    result, events = await run_graph(tmp_path, graph([node]), provider)
    # Fail-open: the cascade without its quality check decides, and the verdict says why.
    assert result.status == "completed" and result.quality == "degraded"
    [quality] = [v for v in of(events, Verdict) if v.level == "quality"]
    assert quality.action == "accept" and quality.error is not None
    assert "TruncatedError: scripted: truncated at 8192 tokens" in quality.error
    assert provider.calls_for("judge") == 6  # three tries, each asked once more


def _routed_model(verdict: list[Any]) -> ScriptedProvider:
    return ScriptedProvider(
        [
            reply("Dear Ann"),
            reply("", tool_call("set_output", key="draft", value="Dear Ann")),
            *verdict,
        ],
        router=[
            cut('{"target": "long", "reasoning": "detail"}\nAnd also, since the', written=256),
            '{"target": "short", "reasoning": "brief"}',
        ],
    )


async def _record_routed(path: Path, model: ScriptedProvider, grader: ScriptedProvider) -> Any:
    async with Runtime(
        path,
        provider=model,
        providers={"grader": grader},
        functions=FUNCTIONS,
        judges={"strict": Strict()},
    ) as rt:
        result = await (await rt.start(routed(retry=FAST), input={"to": "Ann"})).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
    return result, events


async def test_a_router_verifier_and_goal_evaluator_never_read_a_cut_answer(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    model = _routed_model(
        [
            cut('{"score": 0.9, "reasoning": "court', given=70, written=512),
            cut('{"score": 0.9, "reasoning": "courteous and', given=71, written=8192),
            '{"score": 0.2, "reasoning": "curt"}',
        ]
    )
    grader = ScriptedProvider(
        [cut('{"score": 0.95, "reason', written=512), cut('{"score": 0.95', written=8192)],
        name="grader",
    )
    result, events = await _record_routed(db, model, grader)

    # The router's cut answer held a whole object: before, it was read, and went "long".
    [routed_edge] = [e for e in of(events, EdgeTaken) if e.condition == "llm_decide"]
    assert (routed_edge.target, routed_edge.judge_error) == ("short", None)

    # The evaluator cut twice: no score (before, 0.9 was read from half an answer), its
    # tokens recorded, the attempt failed; the next attempt's evaluator answered.
    first, second = of(events, VerificationRecorded)
    assert (first.attempt, first.passed, first.stop) == (1, False, "max_tokens")
    assert (first.input_tokens, first.output_tokens) == (141, 8704)
    assert "cut at the token cap" in first.result["reasoning"]
    [failed] = [f for f in of(events, NodeFailed) if f.node_id == "grade"]
    assert (failed.error_type, failed.will_retry) == ("TruncatedError", True)
    assert (second.attempt, second.passed, second.stop) == (2, False, None)
    assert result.memory["grade_verification_passed"] is False

    # The goal's evaluator cut twice: the criterion is unscored (a judge failure).
    assert result.goal_outcome is not None
    polite = next(c for c in result.goal_outcome.criteria if c.id == "polite")
    assert polite.method == "unscored" and polite.score is None
    assert polite.error is not None and "truncated at 8192 tokens" in polite.error
    assert result.quality == "degraded"

    async with offline(db, Failing()) as rt:
        report = await rt.replay(result.run_id)
    assert report.equal, report.summary()
    assert report.stopped is None


async def test_a_verifier_cut_twice_before_a_crash_fails_without_asking_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    model = _routed_model(
        [
            cut('{"score": 0.9', written=512),
            cut('{"score": 0.9, "re', written=8192),
            '{"score": 0.8, "reasoning": "kind"}',
        ]
    )
    grader = ScriptedProvider(['{"score": 0.9, "reasoning": "ok"}'], name="grader")
    first, _ = await _record_routed(db, model, grader)
    async with Runtime(db) as rt:
        events = await rt.read_events(first.run_id)
    [cut_at] = [e for e in events if isinstance(e.body, VerificationRecorded)][:1]
    # A fork right after the cut evaluation resumes the attempt as a restart there would.
    again = ScriptedProvider(['{"score": 0.95, "reasoning": "fine"}'])
    grader = ScriptedProvider(['{"score": 0.9, "reasoning": "ok"}'], name="grader")
    async with Runtime(
        db,
        provider=again,
        providers={"grader": grader},
        functions=FUNCTIONS,
        judges={"strict": Strict()},
    ) as rt:
        fork = await rt.fork(first.run_id, cut_at.seq)
        result = await fork.result()
        forked = [e.body for e in await rt.read_events(fork.run_id)][cut_at.seq :]
    [failed] = [f for f in of(forked, NodeFailed) if f.node_id == "grade"]
    assert failed.error_type == "TruncatedError" and "truncated" in failed.error
    # Only the next attempt asked the evaluator: the cut one was not asked again.
    assert again.calls_for("verify") == 1
    [verified] = of(forked, VerificationRecorded)
    assert (verified.attempt, verified.passed) == (2, True)
    assert result.memory["grade_verification_passed"] is True
    assert msgspec.to_builtins(cut_at.body)["stop"] == "max_tokens"


async def test_a_goal_evaluator_that_failed_replays_equal(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    model = _routed_model(['{"score": 0.9, "reasoning": "kind"}'])
    grader = ScriptedProvider([ProviderError("grader", "overloaded")], name="grader")
    result, _ = await _record_routed(db, model, grader)
    assert result.goal_outcome is not None
    polite = next(c for c in result.goal_outcome.criteria if c.id == "polite")
    assert polite.error == "the evaluator failed: grader: overloaded"
    async with offline(db, Failing()) as rt:
        report = await rt.replay(result.run_id)
    # Before, the replay's failure said it anew ("replay: (recorded failure) ..."): the
    # criterion's reasoning, and so the goal outcome, differed from the record.
    assert report.equal, report.summary()
