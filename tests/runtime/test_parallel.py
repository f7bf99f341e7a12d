"""Parallel branches of an LLM node through the public API, with scripted models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from runtime import (
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    Runtime,
    RuntimeMetrics,
    ScriptedProvider,
    SpecErrors,
    ToolCall,
    Usage,
)
from runtime.events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchTurn,
    LlmTurn,
    NodeFailed,
    ToolResult,
    fold,
)
from runtime.spec import BranchCandidate, BranchJudgeSpec, BranchSpec, ParallelSpec
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio

QUESTION = "What is the capital of France? Answer in one word."


def answering(text: str, *, tokens: int = 10, name: str = "p") -> ScriptedProvider:
    """A branch model: sets the output, then answers ``text``."""
    usage = Usage(input_tokens=tokens, output_tokens=tokens)
    return ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value=text.strip())),
            LlmResponse(text=text, usage=usage, model=name, stop_reason="end_turn"),
        ],
        name=name,
    )


def parallel_graph(
    strategy: str = "llm_judge", *, judge: BranchJudgeSpec | None = None, n: int = 3
) -> GraphSpec:
    return GraphSpec(
        id="parallel",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                input_keys=["question"],
                output_keys=["answer"],
                parallel=ParallelSpec(
                    branches=[
                        BranchSpec(label=f"b{i}", provider=f"p{i}", temperature=0.1 * i)
                        for i in range(n)
                    ],
                    strategy=strategy,
                    judge=judge or BranchJudgeSpec(provider="judge"),
                ),
            )
        ],
    )


async def run_parallel(
    graph: GraphSpec, providers: dict[str, Any], **runtime: Any
) -> tuple[Any, list[Any]]:
    async with Runtime(None, provider=ScriptedProvider([]), providers=providers, **runtime) as rt:
        result = await (await rt.start(graph, input={"question": QUESTION})).result()
        events = [e for e in await rt.read_events(result.run_id)]
    return result, events


async def test_an_llm_judge_picks_one_branch_and_only_its_messages_continue() -> None:
    branches = {
        f"p{i}": answering(t, name=f"m{i}") for i, t in enumerate(["Lyon", "Paris", "Nice"])
    }
    judge = ScriptedProvider(["After reading them, Response 2 is the best."], name="judge")
    result, events = await run_parallel(parallel_graph(), {**branches, "judge": judge})

    assert result.status == "completed" and result.memory["answer"] == "Paris"
    bodies = [e.body for e in events]
    turns = [b for b in bodies if isinstance(b, BranchTurn)]
    assert sorted((t.branch, t.label, t.iteration) for t in turns) == [
        (0, "b0", 1), (0, "b0", 2), (1, "b1", 1), (1, "b1", 2), (2, "b2", 1), (2, "b2", 2),
    ]  # fmt: skip
    assert sum(isinstance(b, BranchFinished) and b.ok for b in bodies) == 3
    selected = next(b for b in bodies if isinstance(b, BranchesSelected))
    assert (selected.winner, selected.label, selected.strategy) == (1, "b1", "llm_judge")
    assert selected.candidates == [0, 1, 2]
    # The node's conversation holds the winner's turns only (the fold and the live log).
    assistant = [c.content for c in fold(events).conversation if c.role == "assistant"]
    assert assistant == ["", "Paris"]
    node_turns = [b for b in bodies if isinstance(b, LlmTurn)]
    assert [t.text for t in node_turns] == ["", "Paris"] and node_turns[0].input_tokens == 0
    # Each branch ran on its own model settings, from the same conversation.
    firsts = [p.requests[0] for p in branches.values()]
    assert [r.temperature for r in firsts] == [0.0, 0.1, 0.2]
    assert len({tuple(m.content for m in r.messages) for r in firsts}) == 1
    # The judge saw the query and the final answers only, numbered from 1.
    prompt = judge.requests[0].messages[0].content
    assert "Request:\n[Inputs]" in prompt and QUESTION in prompt
    assert "Response 1:\nLyon" in prompt and "Response 3:\nNice" in prompt
    assert "set_output" not in prompt and "Conversation so far" not in prompt
    judged = next(b for b in bodies if isinstance(b, BranchesJudged))
    assert judged.text.startswith("After reading") and judged.compacted is False


async def test_a_judge_reply_without_a_usable_number_falls_back_to_the_first_branch() -> None:
    for answer in ("I like them all.", "Response 7"):
        branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
        judge = ScriptedProvider([answer], name="judge")
        result, events = await run_parallel(parallel_graph(), {**branches, "judge": judge})
        selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
        assert selected.winner == 0 and "fallback" in selected.reason
        assert result.memory["answer"] == "Lyon"


@pytest.mark.parametrize(
    ("strategy", "texts", "tokens", "winner"),
    [
        ("fewest_tokens", ["Lyon", "Paris", "Nice"], [30, 10, 20], 1),
        ("most_tokens", ["Lyon", "Paris", "Nice"], [30, 10, 40], 2),
        ("fewest_tokens", ["Lyon", "Paris", "Nice"], [10, 10, 20], 0),  # a tie: the first
        ("majority_vote", ["Lyon", "Paris.", " paris "], [1, 1, 1], 1),
        ("majority_vote", ["Lyon", "Paris", "Nice"], [1, 1, 1], 0),
    ],
)
async def test_deterministic_strategies(
    strategy: str, texts: list[str], tokens: list[int], winner: int
) -> None:
    branches = {
        f"p{i}": answering(t, tokens=n) for i, (t, n) in enumerate(zip(texts, tokens, strict=True))
    }
    result, events = await run_parallel(parallel_graph(strategy), branches)
    selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
    assert selected.winner == winner, selected.reason
    assert result.memory["answer"] == texts[winner].strip()
    assert not any(isinstance(e.body, BranchesJudged) for e in events)


class _Gated:
    """A provider that answers only once ``gate`` is set (by a commit hook)."""

    name = "gated"

    def __init__(self, inner: ScriptedProvider, gate: anyio.Event) -> None:
        self.inner = inner
        self.gate = gate

    async def complete(self, request: LlmRequest) -> LlmResponse:
        await self.gate.wait()
        return await self.inner.complete(request)


async def test_first_success_takes_the_branch_that_finished_first() -> None:
    gate = anyio.Event()

    def open_gate(run_id: str, seq: int, bodies: Sequence[Any]) -> None:
        if any(isinstance(b, BranchFinished) and b.branch == 2 for b in bodies):
            gate.set()

    providers: dict[str, Any] = {
        "p0": _Gated(answering("Lyon"), gate),
        "p1": _Gated(answering("Paris"), gate),
        "p2": answering("Nice"),
    }
    result, events = await run_parallel(
        parallel_graph("first_success"), providers, hooks=[open_gate]
    )
    finished = [e.body.branch for e in events if isinstance(e.body, BranchFinished)]
    assert finished[0] == 2
    assert result.memory["answer"] == "Nice"


class Longest:
    """A custom strategy: the longest answer."""

    def __init__(self) -> None:
        self.seen: list[list[BranchCandidate]] = []

    def select(self, candidates: Sequence[BranchCandidate], query: str) -> int:
        self.seen.append(list(candidates))
        return max(candidates, key=lambda c: len(c.text)).index


async def test_a_registered_custom_strategy_object_chooses() -> None:
    longest = Longest()
    branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    result, _ = await run_parallel(
        parallel_graph("longest"), branches, branch_strategies={"longest": longest}
    )
    assert result.memory["answer"] == "Paris"
    assert [c.label for c in longest.seen[0]] == ["b0", "b1", "b2"]


async def test_a_branch_that_fails_is_left_out_and_no_answer_fails_the_node() -> None:
    from runtime import ProviderError

    broken = ScriptedProvider([ProviderError("p0", "down")])  # type: ignore[list-item]
    branches: dict[str, Any] = {"p0": broken, "p1": answering("Paris"), "p2": answering("Nice")}
    judge = ScriptedProvider(["1"], name="judge")
    result, events = await run_parallel(parallel_graph(), {**branches, "judge": judge})
    selected = next(e.body for e in events if isinstance(e.body, BranchesSelected))
    assert selected.candidates == [1, 2] and selected.winner == 1  # "Response 1" is b1
    assert result.memory["answer"] == "Paris"

    dead = {f"p{i}": ScriptedProvider([ProviderError("x", "down")]) for i in range(2)}  # type: ignore[list-item]
    failed, events = await run_parallel(parallel_graph("first_success", n=2), dead)
    assert failed.status == "failed"
    failure = next(e.body for e in events if isinstance(e.body, NodeFailed))
    assert failure.error_type == "BranchesFailed" and "b0: ProviderError" in failure.error


async def test_the_judge_prompt_is_compacted_to_its_budget() -> None:
    long_answer = "\n\n".join(f"Paragraph {i}. " + "word " * 400 for i in range(6))
    branches = {
        "p0": answering("Lyon"),
        "p1": answering(long_answer),
        "p2": answering("Nice"),
    }
    judge = ScriptedProvider(["2"], name="judge")
    graph = parallel_graph(judge=BranchJudgeSpec(provider="judge", max_context_tokens=1_024))
    result, events = await run_parallel(graph, {**branches, "judge": judge})
    judged = next(e.body for e in events if isinstance(e.body, BranchesJudged))
    assert judged.compacted and judged.prompt_tokens <= 1_024 - 512
    prompt = judge.requests[0].messages[0].content
    assert "Paragraph 0." in prompt and "[...]" in prompt and "Paragraph 3." not in prompt
    # The winner continues uncompacted.
    assert result.memory["answer"] == long_answer.strip()
    assert not any(isinstance(e.body, BranchJudgeWarning) for e in events)


async def test_a_budget_that_cannot_be_met_is_a_warning_event_and_the_judge_still_runs() -> None:
    branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    judge = ScriptedProvider(["3"], name="judge")
    graph = parallel_graph(judge=BranchJudgeSpec(provider="judge", max_context_tokens=1_024))
    async with Runtime(
        None, provider=ScriptedProvider([]), providers={**branches, "judge": judge}
    ) as rt:
        handle = await rt.start(graph, input={"question": "Why? " + "because " * 800})
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    warning = next(e.body for e in events if isinstance(e.body, BranchJudgeWarning))
    assert warning.prompt_tokens > warning.budget_tokens == 512
    assert result.memory["answer"] == "Nice"


def test_parallel_settings_are_validated_naming_the_field() -> None:
    from runtime import graph_from_dict
    from runtime.spec import graph_to_dict

    data = graph_to_dict(parallel_graph())
    data["nodes"][0]["parallel"]["branches"] = data["nodes"][0]["parallel"]["branches"][:1]
    data["nodes"][0]["parallel"]["max_turns"] = 0
    with pytest.raises(SpecErrors) as info:
        graph_from_dict(data)
    paths = [e.path for e in info.value.errors]
    assert "nodes[0].parallel.branches" in paths and "nodes[0].parallel.max_turns" in paths


async def test_unknown_providers_and_strategies_are_refused_at_start() -> None:
    async with Runtime(None, provider=ScriptedProvider([]), providers={"p0": answering("x")}) as rt:
        with pytest.raises(SpecErrors) as info:
            await rt.start(parallel_graph("nonesuch"))
    paths = [e.path for e in info.value.errors]
    assert paths == [
        "nodes[0].parallel.branches[1].provider",
        "nodes[0].parallel.branches[2].provider",
        "nodes[0].parallel.strategy",
    ]


async def test_a_branch_turn_records_distinct_ids_and_refuses_what_the_log_cannot_store() -> None:
    def branch_model(name: str) -> ScriptedProvider:
        nan = float("nan")
        return ScriptedProvider(
            [
                reply(
                    "",
                    ToolCall(id="d", name="set_output", arguments={"key": "answer", "value": nan}),
                    ToolCall(
                        id="d", name="set_output", arguments={"key": "answer", "value": "Paris"}
                    ),
                ),
                reply("Paris"),
            ],
            name=name,
        )

    providers = {f"p{i}": branch_model(f"p{i}") for i in range(2)}
    result, events = await run_parallel(parallel_graph("first_success", n=2), providers)
    assert result.status == "completed"
    assert result.memory["answer"] == "Paris"
    turns = [e.body for e in events if isinstance(e.body, BranchTurn) and e.body.tool_calls]
    assert [[(c.id, c.arguments["value"]) for c in t.tool_calls] for t in turns] == [
        [("d", None), ("d_2", "Paris")]
    ] * 2
    results = [(e.body.call_id, e.body.is_error) for e in events if isinstance(e.body, ToolResult)]
    assert results == [("d", True), ("d_2", False)]


async def test_branch_turns_count_their_tokens_cached_ones_included() -> None:
    usage = Usage(input_tokens=30, output_tokens=5, input_cached=20, input_cache_write=7)

    def branch(text: str, name: str) -> ScriptedProvider:
        return ScriptedProvider(
            [
                reply("", tool_call("set_output", key="answer", value=text)),
                LlmResponse(text=text, usage=usage, model=name, stop_reason="end_turn"),
            ],
            name=name,
        )

    registry = CollectorRegistry()
    providers = {"p0": branch("Paris", "m0"), "p1": branch("Paris", "m1")}
    result, events = await run_parallel(
        parallel_graph("first_success", n=2), providers, metrics=RuntimeMetrics(registry)
    )
    assert result.status == "completed"
    turns = [e.body for e in events if isinstance(e.body, BranchTurn)]
    assert [(t.input_cached, t.input_cache_write) for t in turns if t.input_tokens] == [
        (20, 7),
        (20, 7),
    ]

    def tokens(direction: str) -> float | None:
        return registry.get_sample_value("magistrate_llm_tokens_total", {"direction": direction})

    assert (tokens("input"), tokens("output")) == (60, 10)
    assert (tokens("input_cached"), tokens("input_cache_write")) == (40, 14)
