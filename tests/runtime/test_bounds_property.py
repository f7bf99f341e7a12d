"""Property tests for the loop bounds: no node exceeds max_iterations, no run max_steps.

Whatever the judge says (always RETRY, random, raising, the implicit cascade with an
unreliable quality model) and whatever the model does (never set outputs, repeat itself,
random), an LLM node visit makes at most ``max_iterations`` turns; on random graphs of
function nodes (conditional, always, on_success, on_failure edges, self-loops, failing
nodes) a run starts at most ``max_steps`` nodes and always records its end. Those graphs
avoid fan-out: see the xfail test at the end for a fan-out that hangs the executor. All
checks read the recorded events of a real Runtime on the in-memory log.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import Event
from runtime._errors import ProviderError
from runtime._runtime import Runtime
from runtime.events import LlmTurn, NodeStarted, RunFinished
from runtime.llm._tools import tool
from runtime.llm._verdict import JudgeContext, JudgeProtocol
from runtime.providers._base import LlmRequest, LlmResponse, ToolCall
from runtime.providers._scripted import ScriptedProvider
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec, RetryPolicy

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0, jitter=0.0)


@tool
async def lookup(q: str) -> str:
    """Look something up (canned)."""
    return f"results for {q}"


class AlwaysRetry:
    async def evaluate(self, context: JudgeContext) -> str:
        return "retry"


class RandomJudge:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def evaluate(self, context: JudgeContext) -> str:
        return self.rng.choice(["accept", "retry", "escalate"])


class RaisingJudge:
    async def evaluate(self, context: JudgeContext) -> str:
        raise RuntimeError("judge is broken")


def model(kind: str, seed: int) -> ScriptedProvider:
    rng = random.Random(seed)
    ids = iter(range(1_000_000))

    def response(text: str = "", *calls: tuple[str, dict[str, Any]]) -> LlmResponse:
        tool_calls = [ToolCall(id=f"c{next(ids)}", name=n, arguments=a) for n, a in calls]
        return LlmResponse(text=text, tool_calls=tool_calls, model="scripted")

    def turn(request: LlmRequest) -> LlmResponse:
        if kind == "stalls":
            return response("", ("lookup", {"q": "same"}))
        if kind == "never_outputs":
            if rng.random() < 0.3:
                return response("Still thinking.")
            return response("", ("lookup", {"q": f"q{rng.randint(0, 2)}"}))
        roll = rng.random()
        if roll < 0.3:
            return response("Done.")
        if roll < 0.7:
            key = rng.choice(["answer", "notes", "bogus"])
            return response("", ("set_output", {"key": key, "value": rng.choice([None, 1])}))
        return response("", ("lookup", {"q": "x"}))

    def judge(request: LlmRequest) -> LlmResponse:
        roll = rng.random()
        if roll < 0.25:
            raise ProviderError("scripted", "quality model down")
        if roll < 0.35:
            return response("no idea")
        return response('{"verdict": "%s"}' % ("ACCEPT" if roll < 0.7 else "RETRY"))

    return ScriptedProvider(turn, judge=judge)


def turns_per_visit(events: Sequence[Event]) -> list[int]:
    counts: list[int] = []
    for event in events:
        if isinstance(event.body, NodeStarted) and event.body.node_id == "worker":
            counts.append(0)
        elif isinstance(event.body, LlmTurn):
            counts[-1] += 1
    return counts


def assert_finished_once(events: Sequence[Event]) -> None:
    finished = [e for e in events if isinstance(e.body, RunFinished)]
    assert len(finished) == 1 and events[-1] is finished[0]


@settings(max_examples=30, deadline=None)
@given(
    max_iterations=st.integers(min_value=1, max_value=15),
    max_steps=st.integers(min_value=1, max_value=8),
    judge=st.sampled_from(["always_retry", "random", "raises", "implicit"]),
    behaviour=st.sampled_from(["never_outputs", "stalls", "random"]),
    on_success=st.sampled_from(["worker", "fix", "done"]),
    every_n=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
async def test_no_node_visit_exceeds_max_iterations(
    max_iterations: int,
    max_steps: int,
    judge: str,
    behaviour: str,
    on_success: str,
    every_n: int,
    seed: int,
) -> None:
    worker = NodeSpec(
        id="worker",
        kind="llm",
        output_keys=["answer", "notes"],
        nullable_keys=["notes"],
        success_criteria=["The answer is specific."] if judge == "implicit" else [],
        tools=["lookup"],
        max_iterations=max_iterations,
        judge=None if judge == "implicit" else judge,
        judge_every_n_turns=every_n,
    )
    graph = GraphSpec(
        id="bounded",
        nodes=[
            worker,
            NodeSpec(id="fix", kind="function", function="noop"),
            NodeSpec(id="done", kind="function", function="noop"),
        ],
        edges=[
            EdgeSpec(source="worker", target="fix", condition="on_failure"),
            EdgeSpec(source="fix", target="worker", condition="always"),
            EdgeSpec(source="worker", target=on_success),
            # Keeps "done" reachable (validation refuses unreachable nodes); never fires.
            EdgeSpec(source="fix", target="done", condition="conditional", expression="n == -1"),
        ],
        entry_node="worker",
        max_steps=max_steps,
        retry=FAST,
    )
    judges: dict[str, JudgeProtocol] = {
        "always_retry": AlwaysRetry(),
        "random": RandomJudge(seed),
        "raises": RaisingJudge(),
    }
    async with Runtime(
        None,
        provider=model(behaviour, seed),
        tools=[lookup],
        judges=judges,
        functions={"noop": lambda inputs: {}},
    ) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status in ("completed", "failed")
    visits = turns_per_visit(events)
    assert visits, "the worker never started"
    assert all(1 <= count <= max_iterations for count in visits), visits
    assert all(e.body.iteration <= max_iterations for e in events if isinstance(e.body, LlmTurn))
    assert_finished_once(events)


EXPRESSIONS = ["n % 2 == 0", "n > 3", "n < 100", "n == 1", "flag"]
CONDITIONS = ["always", "on_success", "on_failure", "conditional"]


def edge(source: str, target: str, condition: str, expression: str | None) -> EdgeSpec:
    return EdgeSpec(
        source=source,
        target=target,
        condition=condition,  # type: ignore[arg-type]
        expression=expression if condition == "conditional" else None,
    )


edges_strategy = st.tuples(
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.sampled_from(CONDITIONS),
    st.sampled_from(EXPRESSIONS),
)


def bump(inputs: dict[str, Any]) -> dict[str, Any]:
    n = int(inputs.get("n", 0)) + 1
    return {"n": n, "flag": n % 3 == 0}


def flaky(inputs: dict[str, Any]) -> dict[str, Any]:
    n = int(inputs.get("n", 0))
    if n % 3 == 2:
        raise ValueError(f"flaky at n={n}")
    return {"n": n + 1, "flag": False}


def without_fan_out(edges: list[EdgeSpec]) -> list[EdgeSpec]:
    """Drop edges that would make a node fire two edges at once (a fan-out).

    Conditional edges never fan out (the first true one wins alone); otherwise all
    on_success + always edges fire on success, all on_failure + always on failure, so a
    node keeps one ``always`` edge or at most one ``on_success`` and one ``on_failure``.
    """
    kept: list[EdgeSpec] = []
    seen: dict[str, set[str]] = {}
    for e in edges:
        kinds = seen.setdefault(e.source, set())
        if e.condition == "always" and kinds:
            continue
        if e.condition in ("on_success", "on_failure") and kinds & {e.condition, "always"}:
            continue
        if e.condition != "conditional":
            kinds.add(e.condition)
        kept.append(e)
    return kept


@settings(max_examples=30, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=6),
    chain=st.lists(
        st.tuples(st.sampled_from(CONDITIONS), st.sampled_from(EXPRESSIONS)),
        min_size=5,
        max_size=5,
    ),
    extra=st.lists(edges_strategy, max_size=8),
    flaky_nodes=st.sets(st.integers(min_value=0, max_value=5), max_size=3),
    max_steps=st.integers(min_value=1, max_value=30),
)
async def test_no_run_exceeds_max_steps_on_random_graphs(
    size: int,
    chain: list[tuple[str, str]],
    extra: list[tuple[int, int, str, str]],
    flaky_nodes: set[int],
    max_steps: int,
) -> None:
    nodes = [
        NodeSpec(id=f"n{i}", kind="function", function="flaky" if i in flaky_nodes else "bump")
        for i in range(size)
    ]
    # A chain keeps every node reachable (validation refuses unreachable ones).
    edges = [edge(f"n{i}", f"n{i + 1}", *chain[i]) for i in range(size - 1)]
    edges += [
        edge(f"n{s % size}", f"n{t % size}", condition, expression)
        for s, t, condition, expression in extra
    ]
    graph = GraphSpec(
        id="random",
        nodes=nodes,
        edges=without_fan_out(edges),
        entry_node="n0",
        max_steps=max_steps,
        retry=FAST,
    )
    async with Runtime(None, functions={"bump": bump, "flaky": flaky}) as rt:
        handle = await rt.start(graph, input={"n": 0})
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status in ("completed", "failed")
    starts = sum(1 for e in events if isinstance(e.body, NodeStarted) and e.body.attempt == 1)
    assert 1 <= starts <= max_steps
    assert_finished_once(events)


async def test_a_branch_reaching_a_node_another_branch_runs_still_finishes() -> None:
    # a fans out to b and c; b then goes to c while c's own branch may still run it.
    graph = GraphSpec(
        id="diamond",
        nodes=[NodeSpec(id=i, kind="function", function="bump") for i in ("a", "b", "c")],
        edges=[
            EdgeSpec(source="a", target="b"),
            EdgeSpec(source="a", target="c"),
            EdgeSpec(source="b", target="c"),
        ],
        entry_node="a",
        max_steps=6,
    )
    async with Runtime(None, functions={"bump": bump}) as rt:
        handle = await rt.start(graph, input={"n": 0})
        # A guard against the hang, not a timing assertion: the run needs milliseconds.
        with anyio.fail_after(3):
            result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status in ("completed", "failed")
    starts = sum(1 for e in events if isinstance(e.body, NodeStarted) and e.body.attempt == 1)
    assert starts <= graph.max_steps
    assert_finished_once(events)
