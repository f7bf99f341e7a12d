"""Metrics that follow a run wherever its events are committed: the ``graph`` label of a
submitted run, a fork and a run cancelled at rest; provider errors by their class; the
model calls of parallel branches, branch judges and verifiers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmResponse,
    NodeSpec,
    Runtime,
    RuntimeMetrics,
    ScriptedProvider,
    Usage,
)
from runtime.events import BranchTurn, LlmTurn, NodeFailed
from runtime.spec import BranchJudgeSpec
from runtime.testing import reply, tool_call

from .test_metrics import _scrape
from .test_parallel import parallel_graph, run_parallel
from .test_verifier import INVOICE, judge_config, verifier_graph
from .test_verifier import run as run_verifier

pytestmark = pytest.mark.anyio


def _take(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"seen": inputs.get("text", "")}


#: take -> [gate] give: a run pauses before ``give``.
GATED = GraphSpec(
    id="gated",
    entry_node="take",
    terminal_nodes=["give"],
    pause_nodes=["give"],
    nodes=[
        NodeSpec(id="take", function="take", output_keys=["seen"]),
        NodeSpec(id="give", function="take", output_keys=["seen"]),
    ],
    edges=[EdgeSpec(source="take", target="give")],
)


async def test_the_graph_label_follows_a_run_submitted_forked_or_cancelled_at_rest(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry, per_graph=True)
    async with Runtime(tmp_path / "runs.db", functions={"take": _take}, metrics=metrics) as rt:
        await rt.submit(GATED, input={"text": "for a worker"})
        paused = await (await rt.start(GATED)).result()
        assert paused.status == "paused"
        await rt.cancel(paused.run_id)  # nothing executes it: counted here, at rest
        other = await (await rt.start(GATED)).result()
        at = (await rt.get_state(other.run_id)).last_seq
        fork = await (await rt.fork(other.run_id, at)).result()
        assert fork.status == "paused"
        samples = await anyio.to_thread.run_sync(_scrape, registry)
    graphs = {dict(labels).get("graph") for _name, labels in samples} - {None}
    assert graphs == {"gated"}  # never "unknown"
    assert samples[("magistrate_runs_started_total", (("graph", "gated"),))] == 4
    cancelled = (("graph", "gated"), ("quality", "none"), ("status", "cancelled"))
    assert samples[("magistrate_runs_finished_total", cancelled)] == 1


async def test_a_truncated_answer_that_fails_a_node_is_a_provider_error() -> None:
    usage = Usage(output_tokens=4096)
    cut = LlmResponse(text="It was the best of", stop="max_tokens", usage=usage)
    provider = ScriptedProvider([cut, cut])  # cut again with the larger cap: TruncatedError
    graph = GraphSpec(
        id="novel",
        entry_node="write",
        nodes=[NodeSpec(id="write", kind="llm", output_keys=["text"])],
    )
    registry = CollectorRegistry()
    async with Runtime(None, provider=provider, metrics=RuntimeMetrics(registry)) as rt:
        result = await (await rt.start(graph)).result()
        events = await rt.read_events(result.run_id)
    assert result.status == "failed"
    failures = [e.body.error_type for e in events if isinstance(e.body, NodeFailed)]
    assert failures == ["TruncatedError"]
    assert registry.get_sample_value("magistrate_provider_errors_total", {"kind": "other"}) == 1


def _branch(text: str, name: str) -> ScriptedProvider:
    usage = Usage(input_tokens=10, output_tokens=10)
    return ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value=text)),
            LlmResponse(text=text, usage=usage, model=name, stop="end", latency_ms=500.0),
        ],
        name=name,
    )


async def test_parallel_branches_calls_are_the_turns_timed_and_the_judges_tokens_count() -> None:
    providers = {f"p{i}": _branch(t, f"m{i}") for i, t in enumerate(["Lyon", "Paris"])}
    usage = Usage(input_tokens=300, output_tokens=7)
    verdict = LlmResponse(text="Response 2 is the best.", usage=usage, model="judge")
    providers["judge"] = ScriptedProvider([verdict], name="judge")
    registry = CollectorRegistry()
    graph = parallel_graph(judge=BranchJudgeSpec(provider="judge"), n=2)
    result, events = await run_parallel(graph, providers, metrics=RuntimeMetrics(registry))
    assert result.status == "completed" and result.memory["answer"] == "Paris"
    branch_turns = [e.body for e in events if isinstance(e.body, BranchTurn)]
    assert len(branch_turns) == 4
    # The winner's two turns are also the node's own llm.turn events: copies, not calls.
    assert len([e for e in events if isinstance(e.body, LlmTurn)]) == 2

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("magistrate_llm_turn_seconds_count") == 4
    assert value("magistrate_llm_turn_seconds_sum") == pytest.approx(
        sum(t.latency_ms for t in branch_turns) / 1000
    )
    # The two branches' answers (10 each; their tool turns report none), and the branch
    # judge's call.
    assert value("magistrate_llm_tokens_total", direction="input") == 20 + 300
    assert value("magistrate_llm_tokens_total", direction="output") == 20 + 7


async def test_an_llm_judge_verifiers_evaluator_tokens_count() -> None:
    answer = LlmResponse(
        text='{"score": 0.9}', usage=Usage(input_tokens=120, output_tokens=9), model="small"
    )
    registry = CollectorRegistry()
    result, _events = await run_verifier(
        verifier_graph(judge_config()),
        {"invoice": INVOICE, "draft": "Our kettle boils in 95 s."},
        providers={"critic": ScriptedProvider([answer], name="critic")},
        metrics=RuntimeMetrics(registry),
    )
    assert result.memory["check_verification"]["passed"] is True
    tokens = "magistrate_llm_tokens_total"
    assert registry.get_sample_value(tokens, {"direction": "input"}) == 120
    assert registry.get_sample_value(tokens, {"direction": "output"}) == 9
