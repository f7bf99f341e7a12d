"""Every model call a run pays for is in its log with its tokens, and the totals agree.

One graph uses each kind of call: an LLM node's turns and its Level 2 judge, an
``llm_decide`` router, a parallel node's branches and their judge, an ``llm_judge``
verifier and the goal's evaluator. The scripted models answer with usage set (cached
counts included); the tokens the log's events record, the run's report, the Prometheus
counter and the providers' own statistics must all give the same totals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtime import LlmRequest, LlmResponse, Runtime, RuntimeMetrics, ScriptedProvider, Usage
from runtime.events import (
    BranchesJudged,
    BranchFinished,
    BranchTurn,
    EdgeTaken,
    LlmTurn,
    RunFinished,
    Verdict,
    VerificationRecorded,
)
from runtime.reads import RunReader, RunReport
from runtime.spec import (
    BranchJudgeSpec,
    BranchSpec,
    EdgeSpec,
    Goal,
    GraphSpec,
    LlmJudgeVerifier,
    NodeSpec,
    ParallelSpec,
    SuccessCriterion,
)
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio

DIRECTIONS = ("input", "output", "input_cached", "input_cache_write")
#: Usage fields of the events that record one kind of call each, in DIRECTIONS' order.
FIELDS = ("input_tokens", "output_tokens", "input_cached", "input_cache_write")
GOAL_FIELDS = tuple(f"goal_{f}" for f in FIELDS)


def done(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


def graph() -> GraphSpec:
    nodes = [
        NodeSpec(
            id="write",
            kind="llm",
            output_keys=["draft"],
            success_criteria=["the draft greets the reader"],
        ),
        NodeSpec(
            id="answer",
            kind="llm",
            output_keys=["answer"],
            description="answer in one word",
            parallel=ParallelSpec(
                branches=[
                    BranchSpec(label="a", provider="p0"),
                    BranchSpec(label="b", provider="p1"),
                ],
                judge=BranchJudgeSpec(provider="bj"),
            ),
        ),
        NodeSpec(id="skip", kind="function", function="done", description="nothing to do"),
        NodeSpec(
            id="grade",
            kind="verifier",
            output_keys=["grade_verification", "grade_verification_passed"],
            verifier=LlmJudgeVerifier(target_key="draft", evaluation_criteria="polite"),
        ),
    ]
    edges = [
        EdgeSpec(source="write", target="answer", condition="llm_decide", fallback="skip"),
        EdgeSpec(source="write", target="skip", condition="llm_decide", fallback="skip"),
        EdgeSpec(source="answer", target="grade"),
        EdgeSpec(source="skip", target="grade"),
    ]
    goal = Goal(
        description="a polite reply",
        success_criteria=[
            SuccessCriterion(id="polite", description="the reply is polite"),
            SuccessCriterion(id="short", description="the answer is short"),
        ],
        evaluator="grader",
    )
    return GraphSpec(
        id="tokens",
        nodes=nodes,
        edges=edges,
        entry_node="write",
        terminal_nodes=["grade"],
        goal=goal,
    )


def usage(n: int) -> Usage:
    """Distinct counts for each call, so a call counted twice or missed shows."""
    return Usage(
        input_tokens=100 * n, output_tokens=10 * n, input_cached=3 * n, input_cache_write=n
    )


def answer(text: str, n: int, **fields: Any) -> LlmResponse:
    return LlmResponse(text=text, usage=usage(n), model="m", stop_reason="end_turn", **fields)


def cut(text: str, n: int) -> LlmResponse:
    return LlmResponse(
        text=text, usage=usage(n), model="m", stop="max_tokens", stop_reason="length"
    )


def branch(text: str, n: int) -> ScriptedProvider:
    first = reply("", tool_call("set_output", key="answer", value=text))
    first = LlmResponse(
        text="", tool_calls=first.tool_calls, usage=usage(n), model="m", stop="tool_use"
    )
    return ScriptedProvider([first, answer(text, n + 1)], name="branch")


def main_model(judge: list[Any], router: list[Any], verify: list[Any]) -> ScriptedProvider:
    """The runtime's provider: the node's turns, its judge, the router, the verifier."""
    turns = [
        LlmResponse(
            text="",
            tool_calls=[tool_call("set_output", key="draft", value="Dear Ann, thanks.")],
            usage=usage(1),
            model="m",
            stop="tool_use",
        ),
        answer("Done.", 2),
    ]
    by_purpose: dict[str, list[Any]] = {"turn": turns, "verify": list(verify)}

    def script(request: LlmRequest) -> LlmResponse:
        response: LlmResponse = by_purpose[request.purpose].pop(0)
        return response

    return ScriptedProvider(script, judge=judge, router=router)


def logged(events: list[Any]) -> Counter[str]:
    """The tokens the log's events record, read field by field (not through the code the
    report and the metrics share)."""
    total: Counter[str] = Counter()
    for body in events:
        if isinstance(body, RunFinished):
            names: tuple[str, ...] = GOAL_FIELDS
        elif isinstance(body, EdgeTaken):
            body, names = body.usage, FIELDS  # None on a plain edge: 0 below
        elif isinstance(
            body, LlmTurn | BranchTurn | BranchesJudged | Verdict | VerificationRecorded
        ):
            names = FIELDS
        else:
            continue
        for direction, name in zip(DIRECTIONS, names, strict=True):
            total[direction] += getattr(body, name, 0)
    return total


def used(providers: list[ScriptedProvider]) -> Counter[str]:
    total: Counter[str] = Counter()
    for provider in providers:
        stats = provider.statistics()
        for direction, name in zip(DIRECTIONS, FIELDS, strict=True):
            total[direction] += getattr(stats, name)
    return total


def reported(report: RunReport) -> Counter[str]:
    tokens = report.tokens
    return Counter(
        input=tokens.input,
        output=tokens.output,
        input_cached=tokens.input_cached,
        input_cache_write=tokens.input_cache_write,
    )


async def run(
    tmp_path: Path, main: ScriptedProvider, others: dict[str, ScriptedProvider]
) -> tuple[Any, list[Any], RunReport, Callable[[str], float]]:
    registry = CollectorRegistry()
    async with Runtime(
        tmp_path / "run.db",
        provider=main,
        providers=others,
        functions={"done": done},
        metrics=RuntimeMetrics(registry),
    ) as rt:
        result = await (await rt.start(graph())).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)

    def counter(direction: str) -> float:
        value = registry.get_sample_value("magistrate_llm_tokens_total", {"direction": direction})
        return value or 0.0

    return result, events, report, counter


def others(*, goal: list[Any] | None = None) -> dict[str, ScriptedProvider]:
    return {
        "p0": branch("Paris", 20),
        "p1": branch("Lyon", 30),
        "bj": ScriptedProvider([answer("Response 1", 40)], name="bj"),
        "grader": ScriptedProvider(
            goal or [answer('{"score": 0.9, "reasoning": "kind"}', 50), answer('{"score": 1}', 51)],
            name="grader",
        ),
    }


async def test_every_kind_of_call_is_logged_reported_and_counted_alike(tmp_path: Path) -> None:
    main = main_model(
        judge=[answer('{"verdict": "ACCEPT", "confidence": 0.9}', 3)],
        router=[answer('{"target": "answer", "reasoning": "a question"}', 4)],
        verify=[answer('{"score": 0.95, "reasoning": "polite"}', 5)],
    )
    named = others()
    result, events, report, counter = await run(tmp_path, main, named)
    assert result.status == "completed" and result.quality == "clean", result
    assert "answer" in result.path

    # Each kind of call carries its own tokens in the log (before, the judge's, the
    # router's and the goal evaluator's were not recorded at all).
    [quality] = [v for v in events if isinstance(v, Verdict) and v.level == "quality"]
    assert (quality.input_tokens, quality.input_cached, quality.input_cache_write) == (300, 9, 3)
    [routed] = [e for e in events if isinstance(e, EdgeTaken) and e.condition == "llm_decide"]
    assert routed.usage is not None
    assert (routed.usage.input_tokens, routed.usage.output_tokens) == (400, 40)
    [finished] = [e for e in events if isinstance(e, RunFinished)]
    assert (finished.goal_input_tokens, finished.goal_output_tokens) == (10100, 1010)
    [verified] = [e for e in events if isinstance(e, VerificationRecorded)]
    assert (verified.input_cached, verified.input_cache_write) == (15, 5)
    [judged] = [e for e in events if isinstance(e, BranchesJudged)]
    assert (judged.input_cached, judged.input_cache_write) == (120, 40)

    providers = [main, *named.values()]
    paid = used(providers)
    assert paid["input"] == 100 * (1 + 2 + 3 + 4 + 5 + 20 + 21 + 30 + 31 + 40 + 50 + 51)
    assert logged(events) == paid
    assert reported(report) == paid  # before: the node's turns only
    assert {d: counter(d) for d in DIRECTIONS} == {d: float(paid[d]) for d in DIRECTIONS}

    # The breakdown by purpose adds up to the total; each purpose is its calls'.
    by_purpose = report.tokens_by_purpose
    assert list(by_purpose) == [
        "turn",
        "branch",
        "branch_judge",
        "judge",
        "route",
        "verify",
        "outcome",
    ]
    assert sum(t.input for t in by_purpose.values()) == report.tokens.input
    assert by_purpose["turn"].input == 300  # the winner's turns copied as the node's: none
    assert by_purpose["branch"].input == 100 * (20 + 21 + 30 + 31)
    assert by_purpose["outcome"].output == 1010
    # A branch's end sums its turns: not a call, not counted again.
    assert sum(b.input_tokens for b in events if isinstance(b, BranchFinished)) == 10200


async def test_paid_calls_that_gave_no_answer_count_too(tmp_path: Path) -> None:
    main = main_model(
        # the judge's first attempt is cut twice (a TruncatedError, both calls paid), its
        # second is unreadable, its third whole: one verdict, all four calls' tokens
        judge=[
            cut('{"verdict": "ACC', 3),
            cut('{"verdict": "ACCEPT", "conf', 6),
            answer("hmm", 8),
            answer('{"verdict": "ACCEPT", "confidence": 0.9}', 7),
        ],
        # the router's answer is cut twice: the fallback fires, both calls recorded
        router=[cut('{"target": "ans', 4), cut('{"target": "answer", "rea', 8)],
        verify=[answer('{"score": 0.95, "reasoning": "polite"}', 5)],
    )
    named = others(goal=[cut('{"score": 0.', 50), cut('{"score": 0.9, "re', 52), "0.9"])
    result, events, report, counter = await run(tmp_path, main, named)
    assert result.status == "completed" and result.quality == "degraded", result
    assert "skip" in result.path

    [quality] = [v for v in events if isinstance(v, Verdict) and v.level == "quality"]
    assert quality.action == "accept" and quality.input_tokens == 100 * (3 + 6 + 8 + 7)
    [routed] = [e for e in events if isinstance(e, EdgeTaken) and e.condition == "llm_decide"]
    assert routed.judge_error is not None and routed.usage is not None
    assert routed.usage.input_tokens == 100 * (4 + 8)
    [finished] = [e for e in events if isinstance(e, RunFinished)]
    assert finished.goal_input_tokens == 100 * (50 + 52)  # the "0.9" answer: no usage

    paid = used([main, *named.values()])
    assert logged(events) == paid
    assert reported(report) == paid
    assert {d: counter(d) for d in DIRECTIONS} == {d: float(paid[d]) for d in DIRECTIONS}


async def test_a_run_with_every_kind_of_call_replays_equal(tmp_path: Path) -> None:
    main = main_model(
        judge=[answer('{"verdict": "ACCEPT", "confidence": 0.9}', 3)],
        router=[answer('{"target": "answer", "reasoning": "a question"}', 4)],
        verify=[answer('{"score": 0.95, "reasoning": "polite"}', 5)],
    )
    result, _, _, _ = await run(tmp_path, main, others())
    async with Runtime(tmp_path / "run.db", functions={"done": done}) as rt:
        replayed = await rt.replay(result.run_id)
    # The replay's calls are served from the log and cost nothing: the token counts of
    # the judge, the router and the goal evaluator are volatile, as the turns' are.
    assert replayed.equal, replayed.summary()
    assert replayed.stopped is None
