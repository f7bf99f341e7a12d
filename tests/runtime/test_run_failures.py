"""No run stays "running" and no value silently changes: cancel reaches busy nodes,
memory values are checked at the node boundary, unexpected errors end the run failed,
a name an edge reads that nothing wrote fails the node."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    JudgeContext,
    LlmRequest,
    LlmResponse,
    MemoryValueError,
    NodeContext,
    NodeSpec,
    ProviderError,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    parse_graph,
    tool,
)
from runtime._node_factory import NodeFactory
from runtime.events import EdgeTaken, LlmTurn, NodeFailed, ToolResult
from runtime.spec import ExpressionVerifier
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio

ONCE = RetryPolicy(max_attempts=1)


def _graph(*nodes: NodeSpec, edges: list[EdgeSpec] | None = None) -> GraphSpec:
    return GraphSpec(
        id="g", nodes=list(nodes), edges=edges or [], entry_node=nodes[0].id, retry=ONCE
    )


async def _failures(rt: Runtime, run_id: str) -> list[NodeFailed]:
    return [e.body for e in await rt.read_events(run_id) if isinstance(e.body, NodeFailed)]


# --- cancel reaches a node whose only awaits are appends ------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_cancel_reaches_a_set_output_progress_loop(tmp_path: Path, store: str) -> None:
    started = anyio.Event()

    async def progress(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        i = 0
        while True:
            i += 1
            await ctx.set_output("done", i)
            started.set()

    path = None if store == "memory" else tmp_path / "runs.db"
    async with Runtime(path, functions={"progress": progress}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="progress")))
        await started.wait()
        await rt.cancel(handle.run_id)
        with anyio.fail_after(30):
            result = await handle.result()
        assert result.status == "cancelled" and result.resume_at == ["a"]
        assert result.memory["done"] >= 1  # the partial output was flushed
        state = await rt.get_state(handle.run_id)
        assert state.status == "cancelled"


async def test_closing_the_runtime_finishes_while_a_progress_loop_runs() -> None:
    started = anyio.Event()

    async def progress(inputs: dict[str, Any], ctx: NodeContext) -> None:
        while True:
            await ctx.set_output("done", 1)
            started.set()

    with anyio.fail_after(30):
        async with Runtime(None, functions={"progress": progress}) as rt:
            await rt.start(_graph(NodeSpec(id="a", function="progress")))
            await started.wait()


class InstantModel:
    """A model that answers every turn at once, without ever suspending."""

    name = "instant"

    def __init__(self, *, calls_tools: bool = False) -> None:
        self.turns = 0
        self.answered = anyio.Event()
        self.calls_tools = calls_tools

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.turns += 1
        self.answered.set()
        if self.calls_tools:  # new arguments each turn: no stall
            return reply("", tool_call("note", n=self.turns))
        return reply("not yet")


@tool
async def note(n: int) -> str:
    """Take a note (answers at once)."""
    return "noted"


class AlwaysRetry:
    async def evaluate(self, context: JudgeContext) -> str:
        return "RETRY"


def _endless_llm_graph(judge: str | None = None, *, tools: bool = False) -> GraphSpec:
    # Each judged turn waits for the judge actor's answer; turns with tool calls are
    # judged only every 10,000th time, so then nothing but the log and the loop yield.
    node = NodeSpec(
        id="ask",
        kind="llm",
        judge=judge,
        max_iterations=10_000,
        output_keys=["answer"],
        tools=["note"] if tools else [],
        judge_every_n_turns=10_000 if tools else 1,
    )
    return _graph(node)


@pytest.mark.parametrize("turns", ["judged", "unjudged tool calls"])
@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_cancel_reaches_an_llm_node_whose_model_never_suspends(
    tmp_path: Path, store: str, turns: str
) -> None:
    tools = turns != "judged"
    model = InstantModel(calls_tools=tools)
    path = None if store == "memory" else tmp_path / "runs.db"
    graph = _endless_llm_graph("retry", tools=tools)
    async with Runtime(path, provider=model, tools=[note], judges={"retry": AlwaysRetry()}) as rt:
        handle = await rt.start(graph)
        await model.answered.wait()
        await rt.cancel(handle.run_id)
        at_cancel = model.turns
        with anyio.fail_after(30):
            result = await handle.result()
        recorded = [e.body for e in await rt.read_events(handle.run_id) if type(e.body) is LlmTurn]
    assert result.status == "cancelled" and result.resume_at == ["ask"]
    assert model.turns <= at_cancel + 1  # the cancel ended the loop within one turn
    assert len(recorded) <= model.turns


async def test_closing_the_runtime_finishes_while_an_llm_node_loops_without_suspending(
    tmp_path: Path,
) -> None:
    model = InstantModel()
    path = tmp_path / "runs.db"
    with anyio.fail_after(30):
        async with Runtime(path, provider=model, judges={"retry": AlwaysRetry()}) as rt:
            handle = await rt.start(_endless_llm_graph())
            await model.answered.wait()
    async with Runtime(path) as rt:
        state = await rt.get_state(handle.run_id)
    assert state.status == "cancelled" and state.pending == ["ask"]
    assert state.error == "the runtime closed"


# --- memory values survive the log unchanged, or the node fails -----------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (float("nan"), "value is nan"),
        (float("inf"), "value is inf"),
        ({1, 2}, "value is a set"),
        ((1, 2), "value is a tuple"),
        (b"abc", "value is a bytes"),
        ({1: "a"}, "value is a dict with a int key 1"),
        ([datetime.date(2026, 1, 1)], "value[0] is a datetime.date"),
        ({"a": [1, float("-inf")]}, "value['a'][1] is -inf"),
    ],
)
async def test_an_output_that_would_change_in_the_log_fails_the_node(
    value: Any, shown: str
) -> None:
    async with Runtime(None, functions={"f": lambda inputs: {"out": value}}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="f")))
        result = await handle.result()
        (failure,) = await _failures(rt, handle.run_id)
    assert result.status == "failed" and "out" not in result.memory
    assert failure.error_type == "MemoryValueError"
    assert failure.error.startswith(f"memory key 'out': {shown}")


@pytest.mark.parametrize("kind", ["object", "surrogate", "cycle"])
async def test_an_output_that_cannot_be_encoded_fails_the_run_cleanly(
    tmp_path: Path, kind: str
) -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    value = {"object": object(), "surrogate": "a\ud800b", "cycle": cyclic}[kind]
    async with Runtime(tmp_path / "r.db", functions={"f": lambda inputs: {"out": value}}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="f")))
        result = await handle.result()
        state = await rt.get_state(handle.run_id)
        (failure,) = await _failures(rt, handle.run_id)
    assert result.status == state.status == "failed"
    assert failure.error_type == "MemoryValueError"


async def test_a_partial_output_that_would_change_raises_in_the_node() -> None:
    seen: list[str] = []

    async def f(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.set_output("x", {1, 2})
        except MemoryValueError as exc:
            seen.append(str(exc))
        return {"x": [1, 2]}

    async with Runtime(None, functions={"f": f}) as rt:
        result = await (await rt.start(_graph(NodeSpec(id="a", function="f")))).result()
    assert result.memory == {"x": [1, 2]}
    assert seen == [
        "memory key 'x': value is a set; a memory value is JSON: None, bool, int, "
        "finite float, str, list, dict with str keys"
    ]


async def test_input_that_would_change_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "r.db", functions={"f": dict}) as rt:
        with pytest.raises(MemoryValueError, match="memory key 'when'"):
            await rt.start(
                _graph(NodeSpec(id="a", function="f")), input={"when": datetime.datetime.now()}
            )
        assert rt.store is not None and await rt.store.list_runs() == []


async def test_a_key_with_a_lone_surrogate_is_refused_wherever_it_is(tmp_path: Path) -> None:
    # A dict key is written to the log as text: half a surrogate pair cannot be encoded, so
    # such a key must be refused where it enters, like a string value holding one.
    seen: list[str] = []

    async def f(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        try:
            await ctx.set_output("out", {"ok": {"\ud800": 1}})
        except MemoryValueError as exc:
            seen.append(str(exc))
        return {"out": [{"fine": 1, "\udfff": True}]}

    graph = _graph(NodeSpec(id="a", function="f"))
    async with Runtime(tmp_path / "r.db", functions={"f": f}) as rt:
        refused = []
        for data in ({"x": {"y": {"\ud800": 1}}}, {"\ud800": 1}):
            with pytest.raises(MemoryValueError) as caught:
                await rt.start(graph, input=data)
            refused.append(str(caught.value))
        assert rt.store is not None and await rt.store.list_runs() == []
        handle = await rt.start(graph)
        result = await handle.result()
        state = await rt.get_state(handle.run_id)
        (failure,) = await _failures(rt, handle.run_id)
    surrogate = "that holds a lone surrogate (not UTF-8)"
    assert refused == [
        f"memory key 'x': value['y'] is a dict with a key '\\ud800' {surrogate}",
        "memory key '\\ud800': the key is a string with a lone surrogate (not UTF-8)",
    ]
    assert seen == [f"memory key 'out': value['ok'] is a dict with a key '\\ud800' {surrogate}"]
    assert result.status == state.status == "failed"
    assert failure.error_type == "MemoryValueError"
    assert failure.error == f"memory key 'out': value[0] is a dict with a key '\\udfff' {surrogate}"


async def test_input_that_is_not_a_mapping_of_str_keys_is_refused(tmp_path: Path) -> None:
    # An int key would come back from the log as a string: the live memory and the fold
    # of the log would disagree. A list or a string is no mapping at all.
    graph = _graph(NodeSpec(id="a", function="f"))
    async with Runtime(tmp_path / "r.db", functions={"f": dict}) as rt:
        with pytest.raises(TypeError, match=r"input keys are memory keys \(str\), got the int 1"):
            await rt.start(graph, input={1: "x"})  # type: ignore[dict-item]
        for bad in ([("a", 1)], "ab"):
            with pytest.raises(TypeError, match="input must be a mapping of memory keys"):
                await rt.start(graph, input=bad)  # type: ignore[arg-type]
        assert rt.store is not None and await rt.store.list_runs() == []
        done = await rt.start(graph, input={"k": 1})
        await done.result()
        with pytest.raises(TypeError, match="data keys are memory keys"):
            await rt.inject_input(done.run_id, {2: "x"})  # type: ignore[dict-item]


async def test_an_llm_output_that_cannot_be_encoded_fails_the_run(tmp_path: Path) -> None:
    provider = ScriptedProvider([reply("", tool_call("set_output", key="a", value=Opaque()))])
    graph = _graph(NodeSpec(id="n", kind="llm", output_keys=["a"]))
    async with Runtime(tmp_path / "r.db", provider=provider) as rt:
        handle = await rt.start(graph)
        with anyio.fail_after(30):
            result = await handle.result()
        state = await rt.get_state(handle.run_id)
    assert result.status == state.status == "failed"


# --- an unexpected error ends the run failed, recorded --------------------------------


async def test_a_commit_hook_that_raises_ends_the_run_failed_in_the_log(tmp_path: Path) -> None:
    calls: list[int] = []

    def hook(run_id: str, seq: int, bodies: Any) -> None:
        calls.append(seq)
        if len(calls) == 2:
            raise RuntimeError("hook broke")

    graph = _graph(
        NodeSpec(id="a", function="f"),
        NodeSpec(id="b", function="f"),
        edges=[EdgeSpec(source="a", target="b")],
    )
    async with Runtime(tmp_path / "r.db", functions={"f": dict}, hooks=[hook]) as rt:
        handle = await rt.start(graph)
        with anyio.fail_after(30):
            result = await handle.result()
        state = await rt.get_state(handle.run_id)
    assert result.status == state.status == "failed"
    assert state.error == "RuntimeError: hook broke"


def _unbuildable(monkeypatch: pytest.MonkeyPatch, node_id: str) -> None:
    """Runtimes that cannot build ``node_id``'s actor. The checks at start refuse what
    they can foresee (an unknown function, kind, tool or provider); this stands in for
    what they cannot (a node actor whose constructor raises)."""
    build = NodeFactory.build

    def unbuildable(
        self: NodeFactory, graph: GraphSpec, spec: NodeSpec, executor: Any, log: Any
    ) -> Any:
        if spec.id == node_id:
            raise RuntimeError(f"node {node_id} cannot be built")
        return build(self, graph, spec, executor, log)

    monkeypatch.setattr(NodeFactory, "build", unbuildable)


@pytest.mark.parametrize(("broken", "path"), [("a", []), ("b", ["a"])])
async def test_a_node_factory_that_raises_ends_the_run_failed_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, path: list[str]
) -> None:
    # "a" is the entry, built at the run's start; the verifier "b" gets an actor of its
    # own when the run reaches it.
    graph = GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="a", function="f", output_keys=["ran"]),
            NodeSpec(
                id="b",
                kind="verifier",
                output_keys=["b_verification", "b_verification_passed"],
                verifier=ExpressionVerifier(expression="ran"),
            ),
        ],
        edges=[EdgeSpec(source="a", target="b")],
        entry_node="a",
        retry=ONCE,
    )
    db = tmp_path / "r.db"
    with monkeypatch.context() as patched:
        _unbuildable(patched, broken)
        with anyio.fail_after(30):
            async with Runtime(db, functions={"f": lambda inputs: {"ran": True}}) as rt:
                result = await (await rt.start(graph)).result()
    async with Runtime(db) as rt:
        state = await rt.get_state(result.run_id)
    assert result.status == state.status == "failed"
    assert result.error == state.error == f"RuntimeError: node {broken} cannot be built"
    assert state.running == {} and state.pending == []
    assert result.path == state.path == path


# --- an edge expression that raises fails the run at its node ---------------------------

REFUND = """
id: refund
entry_node: assess
nodes:
  - {id: assess, function: assess}
  - {id: approve, function: approve}
  - {id: review, function: review}
  - {id: pay, function: pay}
edges:
  - {source: assess, target: approve, condition: conditional, expression: "EXPR"}
  - {source: assess, target: pay, condition: always}
  - {source: assess, target: review, condition: on_failure}
  - {source: approve, target: pay}
"""


def _refund_functions(ran: list[str], amount: Any) -> dict[str, Any]:
    def node(name: str, out: dict[str, Any]) -> Any:
        def run(inputs: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            return out

        return run

    return {
        "assess": node("assess", {"amount": amount}),
        "approve": node("approve", {}),
        "pay": node("pay", {}),
        "review": node("review", {}),
    }


@pytest.mark.parametrize(
    ("expression", "amount", "reason", "read"),
    [
        ("amount > 100", "150", "'>' not supported", "amount='150'"),
        ("amont > 100", 400, "unknown name 'amont'", "amont (not set)"),
    ],
)
async def test_an_edge_expression_that_raises_fails_the_run_and_no_edge_fires(
    tmp_path: Path, expression: str, amount: Any, reason: str, read: str
) -> None:
    ran: list[str] = []
    graph = parse_graph(REFUND.replace("EXPR", expression), "yaml")
    async with Runtime(tmp_path / "runs.db", functions=_refund_functions(ran, amount)) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
        state = await rt.get_state(handle.run_id)
    assert ran == ["assess"]  # neither "pay" (always) nor "review" (on_failure)
    assert result.status == "failed"
    assert result.error is not None
    for part in ("'assess' -> 'approve'", expression, reason, f"it read {read}"):
        assert part in result.error
    assert not [b for b in events if isinstance(b, (EdgeTaken, NodeFailed))]
    # The node's own outputs are kept: it completed; only its routing failed.
    assert state.memory["amount"] == amount
    assert state.path == ["assess"] and state.running == {}


async def test_an_edge_expression_that_raises_in_a_branch_fails_the_run() -> None:
    ran: list[str] = []

    def node(name: str) -> Any:
        def run(inputs: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            return {f"{name}_out": "x"}

        return run

    graph = _graph(
        NodeSpec(id="start", function="start"),
        NodeSpec(id="left", function="left"),
        NodeSpec(id="right", function="right"),
        NodeSpec(id="pay", function="pay"),
        NodeSpec(id="join", function="join"),
        edges=[
            EdgeSpec(source="start", target="left"),
            EdgeSpec(source="start", target="right"),
            EdgeSpec(
                source="left", target="pay", condition="conditional", expression="left_out > 1"
            ),
            EdgeSpec(source="left", target="join", condition="always"),
            EdgeSpec(source="right", target="join"),
        ],
    )
    functions = {n: node(n) for n in ("start", "left", "right", "pay", "join")}
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(graph)).result()
    assert result.status == "failed"
    assert result.error is not None and "'left' -> 'pay'" in result.error
    assert "pay" not in ran and "join" not in ran


async def test_a_node_returning_none_without_its_output_keys_fails(tmp_path: Path) -> None:
    # None is "no outputs", held to output_keys like {}: the node fails, not a later one.
    def nothing(inputs: dict[str, Any]) -> None:
        return None

    strict = _graph(NodeSpec(id="a", function="nothing", output_keys=["x"]))
    lenient = _graph(NodeSpec(id="a", function="nothing", output_keys=["x"], nullable_keys=["x"]))
    async with Runtime(tmp_path / "runs.db", functions={"nothing": nothing}) as rt:
        failed = await (await rt.start(strict)).result()
        failures = await _failures(rt, failed.run_id)
        passed = await (await rt.start(lenient)).result()
    assert failed.status == "failed"
    assert [f.node_id for f in failures] == ["a"]
    # The message reads as a sentence, not as a quoted KeyError key.
    assert failures[0].error == "node 'a' did not return output keys: ['x']"
    assert failures[0].error_type == "OutputKeysError"
    assert failed.error == (
        "node 'a' failed: OutputKeysError: node 'a' did not return output keys: ['x']"
    )
    assert passed.status == "completed" and passed.memory == {}


# --- what a routing model says is recorded, or the run ends failed ----------------------


class _SurrogateError:
    """A provider whose failure message holds a lone surrogate (text no log can store)."""

    name = "odd"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise ProviderError("odd", "gateway said \ud800")


def _routed() -> GraphSpec:
    return GraphSpec(
        id="g",
        entry_node="a",
        nodes=[NodeSpec(id=n, function=n) for n in "abc"],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="c"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="c"),
        ],
    )


_ROUTED_FUNCTIONS = {"a": lambda inputs: {"x": 1}, "b": lambda inputs: {}, "c": lambda inputs: {}}


async def test_an_edge_the_log_cannot_encode_ends_the_run_failed(tmp_path: Path) -> None:
    # The executor commits a node's completion with the next node's start through the
    # store's submit, which refuses an unencodable body at once: the run used to stay
    # "running" (the refused batch stayed queued and failed every later commit too) and
    # its result raised UnicodeEncodeError.
    async with Runtime(
        tmp_path / "r.db", provider=_SurrogateError(), functions=_ROUTED_FUNCTIONS
    ) as rt:
        handle = await rt.start(_routed())
        with anyio.fail_after(10):
            result = await handle.result()
        state = await rt.get_state(handle.run_id)
        assert rt.store is not None and (await rt.store.verify(handle.run_id)).ok
    assert result.status == state.status == "failed"
    assert state.error is not None and state.error.startswith("UnicodeEncodeError")


async def test_a_routing_answer_with_a_lone_surrogate_escape_is_recorded(tmp_path: Path) -> None:
    # JSON's "\ud800" decodes to half a surrogate pair: the reasoning read from the model
    # could not be written to the log, and the run stayed "running".
    model = ScriptedProvider(['{"target": "b", "reasoning": "because \\ud800 so"}'])
    async with Runtime(tmp_path / "r.db", provider=model, functions=_ROUTED_FUNCTIONS) as rt:
        handle = await rt.start(_routed())
        with anyio.fail_after(10):
            result = await handle.result()
        edges = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, EdgeTaken)
        ]
    assert result.status == "completed"
    assert (edges[0].target, edges[0].reason) == ("b", "because \ufffd so")


async def test_a_set_output_value_the_log_would_change_is_refused_to_the_model(
    tmp_path: Path,
) -> None:
    # NaN (which a provider's JSON reading accepts in tool arguments) was set as it came:
    # the live result held nan while the log, and so every later read, held null.
    model = ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value=float("nan"))),
            reply("", tool_call("set_output", key="answer", value=1.5)),
            reply("done"),
        ]
    )
    node = NodeSpec(id="a", kind="llm", output_keys=["answer"])
    async with Runtime(tmp_path / "r.db", provider=model) as rt:
        handle = await rt.start(_graph(node))
        result = await handle.result()
        state = await rt.get_state(handle.run_id)
        results = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, ToolResult)
        ]
    assert result.status == "completed"
    assert result.memory == state.memory == {"answer": 1.5}
    assert [r.is_error for r in results] == [True, False]
    # Refused as every tool call with such arguments is, when the turn is recorded.
    assert results[0].content == (
        "ToolArgumentsError: invalid arguments for tool 'set_output': argument 'value' is nan "
        "(JSON has no NaN or infinity)"
    )
