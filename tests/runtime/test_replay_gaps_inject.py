"""Input injected into a run while it runs (``Runtime.inject_input``, recorded as
``input.injected`` between two of the run's steps, not at a pause) is injected again by
the replay at the same point of the log: a run whose routing and whose later node's
inputs depend on it replays equal, and a change that really diverges is still reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime, tool
from runtime.events import EdgeTaken, InputInjected, MessageAdded, NodeCompleted, NodeStarted
from runtime.testing import ScriptedProvider, reply, tool_call

from .replay_graphs import FUNCTIONS, Failing, offline

pytestmark = pytest.mark.anyio


def routed(first: NodeSpec, expression: str = "go") -> GraphSpec:
    """``first``, then ``ask`` (an LLM node reading ``note``) if ``expression`` holds, else
    ``skip``; the run starts with ``go`` false."""
    return GraphSpec(
        id="injected",
        entry_node=first.id,
        nodes=[
            first,
            NodeSpec(id="ask", kind="llm", input_keys=["note"], output_keys=["reply"]),
            NodeSpec(id="skip", function="done"),
        ],
        edges=[
            EdgeSpec(source=first.id, target="ask", condition="conditional", expression=expression),
            EdgeSpec(source=first.id, target="skip", condition="conditional", expression="not go"),
        ],
    )


WAIT = NodeSpec(id="wait", function="wait", output_keys=["waited"])


def ask_model() -> ScriptedProvider:
    return ScriptedProvider([reply("", tool_call("set_output", key="reply", value="on it")), "ok"])


async def record_injected_while_a_function_runs(db: Path) -> tuple[str, int]:
    """A run whose function node ``wait`` is running when input arrives: the input sets
    ``go`` (so ``ask`` runs) and ``note`` (which ``ask`` reads). Returns the run id and the
    recorded seq of the injection."""
    entered, release = anyio.Event(), anyio.Event()

    async def wait(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"waited": True}

    functions = {"wait": wait, "done": FUNCTIONS["done"]}
    async with Runtime(db, provider=ask_model(), functions=functions) as rt:
        handle = await rt.start(routed(WAIT), input={"go": False})
        await entered.wait()
        # Told to the run's executor before ``wait`` ends: recorded before its completion.
        await rt.inject_input(handle.run_id, {"go": True, "note": "call Ann"})
        release.set()
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed", result.error
    assert result.memory["reply"] == "on it"
    bodies = {e.seq: e.body for e in events}
    [injected] = [seq for seq, body in bodies.items() if isinstance(body, InputInjected)]
    started = next(
        s for s, b in bodies.items() if isinstance(b, NodeStarted) and b.node_id == "wait"
    )
    done = next(
        s for s, b in bodies.items() if isinstance(b, NodeCompleted) and b.node_id == "wait"
    )
    assert started < injected < done  # mid-run: not at a pause
    return handle.run_id, injected


async def test_input_injected_while_a_function_node_runs_replays_equal(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    run_id, _ = await record_injected_while_a_function_runs(db)
    async with offline(db, Failing()) as rt:
        report = await rt.replay(run_id)
    assert report.equal, report.summary()
    assert report.warnings == []
    assert report.model_calls == 2  # ask's two turns: the edge to it fired again


async def test_a_real_divergence_after_an_injection_is_still_reported(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    run_id, _ = await record_injected_while_a_function_runs(db)
    async with Runtime(db) as rt:
        events = await rt.read_events(run_id)
        # Today's edge wants another note than the one injected: it is false now, and
        # no edge leaves `wait`.
        report = await rt.replay(run_id, routed(WAIT, expression="go and note == 'call Bob'"))
    [edge] = [e.seq for e in events if isinstance(e.body, EdgeTaken) and e.body.source == "wait"]
    assert not report.equal
    first = report.divergences[0]
    assert (first.seq, first.kind) == (edge, "edge.taken")
    assert first.reason == (
        "edge `go` now false (its expression is now `go and note == 'call Bob'`)"
    )


async def test_input_injected_between_an_llm_nodes_turns_replays_equal(tmp_path: Path) -> None:
    """The input comes in while the LLM node's tool runs (between its turns); the node after
    it reads it."""
    entered, release = anyio.Event(), anyio.Event()

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        entered.set()
        await release.wait()
        return "sunny"

    plan = NodeSpec(id="plan", kind="llm", tools=["lookup"], output_keys=["plan"])
    model = ScriptedProvider(
        [
            reply("", tool_call("lookup", city="Lisbon")),
            reply("", tool_call("set_output", key="plan", value="go")),
            reply("done"),
            reply("", tool_call("set_output", key="reply", value="on it")),
            "ok",
        ]
    )
    db = tmp_path / "run.db"
    functions = {"done": FUNCTIONS["done"]}
    async with Runtime(db, provider=model, functions=functions, tools=[lookup]) as rt:
        handle = await rt.start(routed(plan), input={"go": False})
        await entered.wait()
        await rt.inject_input(handle.run_id, {"go": True, "note": "call Ann"})
        release.set()
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed", result.error
    asked = [
        e.body.content
        for e in events
        if isinstance(e.body, MessageAdded) and e.body.node_id == "ask" and e.body.kind == "inputs"
    ]
    assert asked and "call Ann" in asked[0]  # ask read the injected note
    async with offline(db, Failing()) as rt:
        report = await rt.replay(handle.run_id)
    assert report.equal, report.summary()
    assert report.model_calls == 5


async def test_input_injected_while_parallel_branches_run_replays_equal(tmp_path: Path) -> None:
    """Two function nodes of a fan-out run when the input comes in: the one recorded as
    finished before it routes without it, the other one with it."""
    early_done, entered, release = anyio.Event(), anyio.Event(), anyio.Event()

    async def early(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"early": True}

    async def late(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"late": True}

    graph = GraphSpec(
        id="fan",
        entry_node="s",
        nodes=[
            NodeSpec(id="s", function="done"),
            NodeSpec(id="early", function="early", output_keys=["early"]),
            NodeSpec(id="late", function="late", output_keys=["late"]),
            NodeSpec(id="with_go", function="done"),
            NodeSpec(id="end", function="done"),
        ],
        edges=[
            EdgeSpec(source="s", target="early"),
            EdgeSpec(source="s", target="late"),
            EdgeSpec(source="early", target="end", condition="conditional", expression="not go"),
            EdgeSpec(source="early", target="with_go", condition="conditional", expression="go"),
            EdgeSpec(source="late", target="end", condition="conditional", expression="not go"),
            EdgeSpec(source="late", target="with_go", condition="conditional", expression="go"),
            EdgeSpec(source="with_go", target="end"),
        ],
    )

    def note_early_done(run_id: str, last: int, bodies: Any) -> None:
        if any(isinstance(b, NodeCompleted) and b.node_id == "early" for b in bodies):
            early_done.set()

    db = tmp_path / "run.db"
    functions = {"done": FUNCTIONS["done"], "early": early, "late": late}
    async with Runtime(db, functions=functions, hooks=[note_early_done]) as rt:
        handle = await rt.start(graph, input={"go": False})
        await entered.wait()
        await early_done.wait()
        await rt.inject_input(handle.run_id, {"go": True})
        release.set()
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed", result.error
    edges = [(e.body.source, e.body.target) for e in events if isinstance(e.body, EdgeTaken)]
    assert ("early", "end") in edges and ("late", "with_go") in edges
    async with offline(db, Failing()) as rt:
        for _ in range(3):
            report = await rt.replay(handle.run_id)
            assert report.equal, report.summary()


async def test_an_injection_the_replay_never_reaches_is_a_warning(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    run_id, injected = await record_injected_while_a_function_runs(db)
    # Today's graph has no node `wait`: the point where the input came in is never reached.
    other = GraphSpec(
        id="injected", entry_node="skip", nodes=[NodeSpec(id="skip", function="done")]
    )
    async with Runtime(db, functions={"done": FUNCTIONS["done"]}) as rt:
        report = await rt.replay(run_id, other, rerun_functions=True)
    assert not report.equal
    assert any(
        w.startswith(f"the input injected at seq {injected} (go, note) was not injected again")
        for w in report.warnings
    ), report.warnings


async def test_input_injected_at_a_gate_before_its_approval_replays_equal(tmp_path: Path) -> None:
    """Input injected while the run waits at a gate, then the gate approved: the replay
    injects it at the gate again before the approval (the gated node's edge reads it)."""
    graph = GraphSpec(
        id="gated",
        entry_node="a",
        pause_nodes=["b"],
        nodes=[
            NodeSpec(id="a", function="done"),
            NodeSpec(id="b", function="done", input_keys=["note"]),
            NodeSpec(id="yes", function="done"),
            NodeSpec(id="no", function="done"),
        ],
        edges=[
            EdgeSpec(source="a", target="b"),
            EdgeSpec(source="b", target="yes", condition="conditional", expression="note == 'new'"),
            EdgeSpec(source="b", target="no", condition="conditional", expression="note != 'new'"),
        ],
    )
    db = tmp_path / "run.db"
    async with Runtime(db, functions={"done": FUNCTIONS["done"]}) as rt:
        handle = await rt.start(graph, input={"note": "old"})
        assert (await handle.result()).paused_reason == "hitl"
        await rt.inject_input(handle.run_id, {"note": "new"})
        approved = await rt.approve(handle.run_id, by="ann")
        assert approved is not None
        result = await approved.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed", result.error
    assert ("b", "yes") in [
        (e.body.source, e.body.target) for e in events if isinstance(e.body, EdgeTaken)
    ]
    async with offline(db, Failing()) as rt:
        report = await rt.replay(handle.run_id)
    assert report.equal, report.summary()
