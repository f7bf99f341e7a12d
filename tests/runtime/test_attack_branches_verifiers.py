"""Parallel rounds of an LLM node and verifier nodes, attacked through real runs: forks
inside a round, a replay through verifiers, a branch whose provider crashes, a verifier
value the log cannot hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    RunStateError,
    Runtime,
    ScriptedProvider,
    ToolCall,
    Usage,
)
from runtime.events import BranchesJudged, BranchesSelected, BranchJudgeWarning, OutputSet
from runtime.spec import (
    BranchJudgeSpec,
    BranchSpec,
    ExpressionVerifier,
    LlmJudgeVerifier,
    ParallelSpec,
)
from runtime.testing import assert_replays

pytestmark = pytest.mark.anyio


def _branch(name: str, first: str, after_feedback: str) -> Any:
    """A branch model: sets the output, then answers (``after_feedback`` once the node's
    judge asked for another round)."""

    def answer(request: LlmRequest) -> LlmResponse:
        feedback = any("RETRY-ME" in m.content for m in request.messages)
        text = after_feedback if feedback else first
        usage = Usage(input_tokens=5, output_tokens=2)
        if request.messages[-1].role == "tool":
            return LlmResponse(text=text, usage=usage, model=name, stop="end")
        call = ToolCall(
            id=f"{name}-{text}", name="set_output", arguments={"key": "answer", "value": text}
        )
        return LlmResponse(text="", tool_calls=[call], usage=usage, model=name, stop="tool_use")

    return answer


def _pick_paris(request: LlmRequest) -> str:
    return "Response 2" if "Paris" in request.messages[0].content else "Response 1"


def _quality(request: LlmRequest) -> str:
    seen = "\n".join(m.content for m in request.messages)
    if seen.rfind("Paris") > seen.rfind("Lyon"):
        return '{"verdict": "ACCEPT", "confidence": 0.9}'
    return '{"verdict": "RETRY", "confidence": 0.9, "feedback": "RETRY-ME: wrong city"}'


def _providers() -> dict[str, Any]:
    return {
        "p0": ScriptedProvider(_branch("m0", "Lyon", "Lyon"), name="p0"),
        "p1": ScriptedProvider(_branch("m1", "Nice", "Paris"), name="p1"),
        "judge": ScriptedProvider(_pick_paris, name="judge"),
    }


RETRIED = GraphSpec(
    id="retried",
    entry_node="answer",
    terminal_nodes=["answer"],
    nodes=[
        NodeSpec(
            id="answer",
            kind="llm",
            input_keys=["question"],
            output_keys=["answer"],
            success_criteria=["names Paris"],
            parallel=ParallelSpec(
                branches=[
                    BranchSpec(label="a", provider="p0"),
                    BranchSpec(label="b", provider="p1"),
                ],
                judge=BranchJudgeSpec(provider="judge"),
            ),
        )
    ],
)


def _summary(result: Any) -> dict[str, Any]:
    fields = ("status", "quality", "memory", "path", "visits", "iterations", "verdicts", "error")
    return {name: getattr(result, name) for name in fields}


async def test_a_fork_inside_a_rounds_selection_is_refused_and_every_other_ends_as_the_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    async with Runtime(
        db, provider=ScriptedProvider([], judge=_quality), providers=_providers()
    ) as rt:
        run = await (await rt.start(RETRIED, input={"question": "capital?"})).result()
        assert run.memory["answer"] == "Paris" and run.verdicts == {
            "answer": {"retry": 1, "accept": 1}
        }
        events = await rt.read_events(run.run_id)
        # Each round's selection is one append with the winner's turns, results and outputs.
        batches = []
        for event in events:
            if isinstance(event.body, BranchesSelected):
                start = event.seq
            if isinstance(event.body, OutputSet):
                batches.append((start, event.seq))
        assert len(batches) == 2
        for start, end in batches:
            for seq in range(start, end):
                with pytest.raises(RunStateError, match=f"up to seq {end}; fork there or before"):
                    await rt.fork(run.run_id, seq)
        for event in events[:-1]:
            try:
                fork = await rt.fork(run.run_id, event.seq)
            except RunStateError:
                continue
            forked = await fork.result()
            assert _summary(forked) == _summary(run), event


def _drafting(request: LlmRequest) -> LlmResponse:
    """A producer: its n-th draft (n: the drafts it was shown before, plus one)."""
    drafts = sum(m.role == "assistant" and m.content.startswith("draft") for m in request.messages)
    text = f"draft {drafts + 1}"
    if request.messages[-1].role == "tool":
        return LlmResponse(text=text, model="m", stop="end")
    call = ToolCall(id=f"d{drafts}", name="set_output", arguments={"key": "draft", "value": text})
    return LlmResponse(text="", tool_calls=[call], model="m", stop="tool_use")


def _scoring(request: LlmRequest) -> str:
    return '{"score": %s, "reasoning": "r"}' % (
        "0.9" if "draft 2" in request.messages[0].content else "0.2"
    )


def _writing(request: LlmRequest) -> LlmResponse:
    if "report" not in request.system:
        return _drafting(request)
    if request.messages[-1].role == "tool":
        return LlmResponse(text="reported", model="m", stop="end")
    call = ToolCall(id="r", name="set_output", arguments={"key": "report", "value": "ok"})
    return LlmResponse(text="", tool_calls=[call], model="m", stop="tool_use")


SELF_CORRECTING = GraphSpec(
    id="self_correcting",
    entry_node="draft",
    terminal_nodes=["report"],
    nodes=[
        NodeSpec(id="draft", kind="llm", input_keys=["topic"], output_keys=["draft"]),
        NodeSpec(
            id="check",
            kind="verifier",
            input_keys=["draft"],
            output_keys=["quality", "quality_passed"],
            verifier=LlmJudgeVerifier(
                target_key="draft",
                evaluation_criteria="good",
                evaluator="critic",
                result_key="quality",
            ),
        ),
        NodeSpec(
            id="long_enough",
            kind="verifier",
            input_keys=["draft"],
            output_keys=["long_enough_verification", "long_enough_verification_passed"],
            verifier=ExpressionVerifier(expression="length(draft) > 3"),
        ),
        NodeSpec(
            id="report",
            kind="llm",
            input_keys=["quality", "long_enough_verification"],
            output_keys=["report"],
        ),
    ],
    edges=[
        EdgeSpec(source="draft", target="check"),
        EdgeSpec(
            source="check",
            target="long_enough",
            condition="conditional",
            expression="quality_passed",
        ),
        EdgeSpec(
            source="check", target="draft", condition="conditional", expression="not quality_passed"
        ),
        EdgeSpec(source="long_enough", target="report"),
    ],
)


async def test_a_self_correcting_loop_through_verifiers_replays_equal(tmp_path: Path) -> None:
    # The verifiers' results (their evaluation times too) reach the next LLM node's
    # conversation: its phase-transition marker and its inputs.
    providers = {"critic": ScriptedProvider(_scoring, name="critic")}
    writer = ScriptedProvider(_writing, name="writer")
    async with Runtime(tmp_path / "runs.db", provider=writer, providers=providers) as rt:
        run = await (await rt.start(SELF_CORRECTING, input={"topic": "rivers"})).result()
        assert run.status == "completed" and run.memory["draft"] == "draft 2"
        assert run.path == ["draft", "check", "draft", "check", "long_enough", "report"]
        await assert_replays(rt, run.run_id)


class _Broken:
    """A provider with a bug: it raises what no provider may (not a ProviderError)."""

    name = "broken"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise RuntimeError("the provider has a bug")


async def test_a_branch_whose_provider_crashes_fails_its_node_naming_the_error(
    tmp_path: Path,
) -> None:
    providers = {
        "p0": _Broken(),
        "p1": ScriptedProvider(_branch("m1", "Paris", "Paris"), name="p1"),
        "judge": ScriptedProvider(_pick_paris, name="judge"),
    }
    graph = msgspec.structs.replace(
        RETRIED, nodes=[msgspec.structs.replace(RETRIED.nodes[0], success_criteria=[])]
    )
    async with Runtime(
        tmp_path / "runs.db", provider=ScriptedProvider([]), providers=providers
    ) as rt:
        run = await (await rt.start(graph, input={"question": "capital?"})).result()
        state = await rt.get_state(run.run_id)
    assert run.status == state.status == "failed"
    assert run.error is not None and "RuntimeError: the provider has a bug" in run.error, run.error


async def test_an_expression_verifiers_value_the_log_cannot_hold_is_the_same_live_and_folded(
    tmp_path: Path,
) -> None:
    # A float that overflows is infinite: no JSON holds it.
    graph = GraphSpec(
        id="overflow",
        entry_node="check",
        terminal_nodes=["check"],
        nodes=[
            NodeSpec(
                id="check",
                kind="verifier",
                input_keys=["x"],
                output_keys=["check_verification", "check_verification_passed"],
                verifier=ExpressionVerifier(expression="x * 1e308 * 10"),
            )
        ],
    )
    async with Runtime(tmp_path / "runs.db") as rt:
        run = await (await rt.start(graph, input={"x": 5})).result()
        state = await rt.get_state(run.run_id)
    assert run.status == "completed" and run.memory["check_verification_passed"] is True
    assert run.memory == state.memory
    assert run.memory["check_verification"]["extracted_value"] == "inf"


async def test_a_fork_between_the_judges_warning_and_its_call_is_refused(tmp_path: Path) -> None:
    # A request longer than the judge's budget: the warning is recorded with the call.
    graph = msgspec.structs.replace(
        RETRIED,
        nodes=[
            msgspec.structs.replace(
                RETRIED.nodes[0],
                success_criteria=[],
                parallel=ParallelSpec(
                    branches=[
                        BranchSpec(label="a", provider="p0"),
                        BranchSpec(label="b", provider="p1"),
                    ],
                    judge=BranchJudgeSpec(provider="judge", max_context_tokens=1_024),
                ),
            )
        ],
    )
    async with Runtime(
        tmp_path / "runs.db", provider=ScriptedProvider([]), providers=_providers()
    ) as rt:
        run = await (await rt.start(graph, input={"question": "Why? " + "because " * 800})).result()
        events = await rt.read_events(run.run_id)
        [warning] = [e.seq for e in events if isinstance(e.body, BranchJudgeWarning)]
        assert isinstance(events[warning].body, BranchesJudged)
        with pytest.raises(RunStateError, match=f"up to seq {warning + 1}; fork there or before"):
            await rt.fork(run.run_id, warning)
