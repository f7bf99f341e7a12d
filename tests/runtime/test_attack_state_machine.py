"""The graph state machine under interruption: a run out of steps at a gate, and a node
cancelled mid-work (by ``cancel`` or by the runtime closing) then resumed, must end as a
run never interrupted does, its log replaying equal against its own graph."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    MemoryKey,
    NodeContext,
    NodeSpec,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    graph_from_dict,
    tool,
)
from runtime.events import ApprovalGranted, RunPaused, fold
from runtime.spec import graph_hash, graph_to_dict
from runtime.testing import function_node, reply, tool_call

pytestmark = pytest.mark.anyio


def count(name: str) -> Any:
    def step(inputs: dict[str, Any]) -> dict[str, Any]:
        return {name: 1}

    return step


async def test_a_run_out_of_steps_fails_before_its_gate_instead_of_asking_for_approval(
    tmp_path: Path,
) -> None:
    graph = GraphSpec(
        id="bounded",
        entry_node="a",
        max_steps=2,
        nodes=[function_node(n, output_keys=[n]) for n in "abc"],
        edges=[EdgeSpec(source="a", target="b"), EdgeSpec(source="b", target="c")],
        pause_nodes=["c"],
    )
    functions = {n: count(n) for n in "abc"}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        result = await (await rt.start(graph)).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
    # The old behaviour: paused at 'c' for an approval that could only end the run failed.
    assert (result.status, result.error) == ("failed", "max_steps (2) reached before 'c'")
    assert not any(isinstance(b, RunPaused | ApprovalGranted) for b in events)


class Gate:
    """Holds a node (or a tool) until the test lets it go."""

    def __init__(self) -> None:
        self.reached = anyio.Event()
        self.open = anyio.Event()

    async def hold(self) -> None:
        self.reached.set()
        await self.open.wait()


NOTES = [MemoryKey(name="notes", reducer="append")]


def llm_graph() -> GraphSpec:
    node = NodeSpec(id="w", kind="llm", output_keys=["notes"], tools=["lookup"])
    return GraphSpec(id="notes", entry_node="w", nodes=[node], memory=NOTES)


def llm_script() -> list[Any]:
    return [
        reply("", tool_call("set_output", key="notes", value="Lisbon")),
        reply("", tool_call("lookup", q="Porto")),
        reply("done"),
    ]


async def test_an_llm_node_cut_by_the_runtime_closing_appends_its_output_once(
    tmp_path: Path,
) -> None:
    gate = Gate()

    @tool
    async def lookup(q: str) -> str:
        """Look a city up."""
        await gate.hold()
        return f"found {q}"

    db = tmp_path / "runs.db"
    async with Runtime(db, provider=ScriptedProvider(llm_script()), tools=[lookup]) as rt:
        handle = await rt.start(llm_graph(), input={"notes": ["seed"]})
        await gate.reached.wait()  # notes is set; the runtime closes mid-node
    gate.open.set()
    async with Runtime(db, provider=ScriptedProvider(llm_script()[2:]), tools=[lookup]) as rt:
        cancelled = await rt.get_state(handle.run_id)
        assert cancelled.status == "cancelled"
        assert cancelled.memory["notes"] == ["seed", "Lisbon"]  # flushed: the work survives
        result = await (await rt.resume(handle.run_id)).result()
        events = await rt.read_events(handle.run_id)
        report = await rt.replay(handle.run_id)
    async with Runtime(
        tmp_path / "reference.db", provider=ScriptedProvider(llm_script()), tools=[lookup]
    ) as rt:
        reference = await (await rt.start(llm_graph(), input={"notes": ["seed"]})).result()
    assert reference.memory["notes"] == ["seed", "Lisbon"]
    # The old behaviour: ["seed", "Lisbon", "Lisbon"], the flush and the completion both.
    assert result.status == "completed"
    assert result.memory == reference.memory == fold(events).memory
    assert report.equal, report.summary()


async def test_a_function_node_cancelled_twice_appends_only_its_final_value(
    tmp_path: Path,
) -> None:
    gates = [Gate(), Gate()]
    held = iter(gates)

    async def work(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.set_output("notes", "draft")
        gate = next(held, None)
        if gate is not None:
            await gate.hold()
        return {"notes": f"final after {inputs['notes']}"}

    graph = GraphSpec(
        id="work",
        entry_node="work",
        nodes=[function_node("work", input_keys=["notes"], output_keys=["notes"])],
        memory=NOTES,
    )
    async with Runtime(tmp_path / "runs.db", functions={"work": work}) as rt:
        handle = await rt.start(graph, input={"notes": ["seed"]})
        for gate in gates:  # cancelled in its first attempt, then in its rerun
            await gate.reached.wait()
            await rt.cancel(handle.run_id)
            assert (await handle.result()).memory["notes"] == ["seed", "draft"]
            if gate is gates[0]:
                handle = await rt.resume(handle.run_id)
        result = await (await rt.resume(handle.run_id)).result()
        events = await rt.read_events(handle.run_id)
        served = await rt.replay(handle.run_id)
        rerun = await rt.replay(handle.run_id, rerun_functions=True)
    # The old behaviour: ["seed", "draft", "draft", "final after ['seed', 'draft', 'draft']"].
    assert result.memory["notes"] == ["seed", "final after ['seed']"]
    assert fold(events).memory == result.memory
    assert served.equal, served.summary()
    assert rerun.equal, rerun.summary()


async def test_a_terminal_node_ends_the_run_without_reading_its_outgoing_edges(
    tmp_path: Path,
) -> None:
    # Its edges matter only inside a fan-out's branch; on the main path the run completes
    # when it succeeds, so an edge nothing could evaluate, or a model's choice, is moot.
    edges = [
        EdgeSpec(source="a", target="b", condition="conditional", expression="retries > 0"),
        EdgeSpec(source="a", target="b", condition="llm_decide", fallback="b"),
    ]
    graph = GraphSpec(
        id="ends",
        entry_node="a",
        terminal_nodes=["a"],
        nodes=[function_node("a", output_keys=["a"]), function_node("b", output_keys=["b"])],
        edges=edges,
        memory=[MemoryKey(name="retries")],
    )
    provider = ScriptedProvider(['{"target": "b", "reasoning": "more"}'])
    functions = {"a": count("a"), "b": count("b")}
    async with Runtime(tmp_path / "runs.db", functions=functions, provider=provider) as rt:
        result = await (await rt.start(graph)).result()
        only_choice = GraphSpec(**{**_fields(graph), "edges": edges[1:], "memory": []})
        chosen = await (await rt.start(only_choice)).result()
    # The old behaviour: failed ("the edge 'a' -> 'b' could not be evaluated: ... unknown
    # name 'retries'"), and a model asked to choose an edge the run would never follow.
    assert (result.status, result.quality, result.memory) == ("completed", "clean", {"a": 1})
    assert (chosen.status, chosen.memory) == ("completed", {"a": 1})
    assert provider.calls == 0


def _fields(graph: GraphSpec) -> dict[str, Any]:
    return {name: getattr(graph, name) for name in graph.__struct_fields__}


async def test_a_graph_with_ints_in_float_fields_resumes_with_the_hash_it_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await gate.hold()
        return {"a": 1}

    # ``timeout=30``, ``initial_delay=1``: ints where the spec declares floats, as Python
    # code writes them; the log reads them back as floats.
    node = function_node("slow", output_keys=["a"], timeout=30)
    graph = GraphSpec(
        id="ints", entry_node="slow", nodes=[node], retry=RetryPolicy(initial_delay=1, jitter=0)
    )
    db = tmp_path / "runs.db"
    async with Runtime(db, functions={"slow": slow}) as rt:
        handle = await rt.start(graph)
        await gate.reached.wait()
        await rt.cancel(handle.run_id)
        await handle.result()
    gate.open.set()
    text = graph_to_dict(graph)
    async with Runtime(db, functions={"slow": slow}) as rt:
        with caplog.at_level(logging.WARNING, logger="magistrate.runtime"):
            result = await (await rt.resume(handle.run_id)).result()
        recorded = (await rt.get_state(handle.run_id)).graph_hash
    assert result.status == "completed"
    # The old behaviour: "its graph reads back with hash ..., not the recorded ... (the
    # spec's fields or defaults changed since it started)", on every resume.
    assert "reads back with hash" not in caplog.text
    assert recorded == graph_hash(graph) == graph_hash(graph_from_dict(text))
