"""What a run leaves behind once it has stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from runtime._result import RunOutcome, RunResult
from runtime._runtime import Runtime
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = pytest.mark.anyio


async def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs.get("x", 0) + 1}


GRAPH = GraphSpec(
    id="chain",
    nodes=[NodeSpec(id=f"n{i}", function="step") for i in range(4)],
    edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(3)],
    entry_node="n0",
)


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "sqlite"])
def test_a_finished_run_leaves_no_cyclic_garbage(tmp_path: Path, durable: bool) -> None:
    # Every stopped actor, its ref, mailbox and outcome must be freed by reference
    # counting: cycles would pile up until the cyclic collector runs, and its full
    # collections cost milliseconds with hundreds of runs in flight. The runs go in a
    # fresh interpreter, where no thread or task of another test makes garbage meanwhile.
    args = [str(tmp_path / "runs.db")] if durable else []
    done = subprocess.run(
        [sys.executable, "-m", "tests.runtime.garbage_target", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "sqlite"])
async def test_a_finished_runs_hooks_are_its_live_entry_and_then_let_go(
    tmp_path: Path, durable: bool
) -> None:
    # A live run's entry is its hooks (its executor and outcome, its log beside them): no
    # object of its own. Once the run is done they hold neither: a kept log (in memory)
    # or handle (its outcome's callbacks) must not keep the executor's ref or the result.
    gate = anyio.Event()

    async def held(inputs: dict[str, Any]) -> dict[str, Any]:
        await gate.wait()
        return {"x": 1}

    graph = GraphSpec(id="one", nodes=[NodeSpec(id="a", function="held")], entry_node="a")
    store = tmp_path / "runs.db" if durable else None
    async with Runtime(store, functions={"held": held}) as rt:
        handle = await rt.start(graph)
        live = rt._running.live
        hooks = live.get(handle.run_id)
        log = live.log(handle.run_id)
        assert hooks is not None and log is not None
        assert log.run_hooks is hooks and hooks.executor.name == f"run:{handle.run_id}"
        assert live.heads() == {handle.run_id: log.last_seq}
        gate.set()
        assert (await handle.result()).status == "completed"
        assert live.get(handle.run_id) is None and live.log(handle.run_id) is None
        assert hooks.outcome is None and not hasattr(hooks, "executor")


async def test_an_outcome_calls_its_callback_once_and_then_drops_it() -> None:
    calls: list[str] = []
    outcome = RunOutcome(on_done=lambda: calls.append("done"))
    outcome.set(RunResult(run_id="r", status="completed"))
    outcome.set(RunResult(run_id="r", status="failed"))
    outcome.fail(RuntimeError("late"))
    assert calls == ["done"]
    assert (await outcome.wait()).status == "completed"
    assert outcome._on_done is None


async def test_a_cancelled_waiter_leaves_the_outcome_to_the_others() -> None:
    # The outcome is one future shared by every waiter: a waiter that gives up (a timeout)
    # must not cancel it under the others, nor make set() fail.
    outcome = RunOutcome()
    with anyio.move_on_after(0.01):
        await outcome.wait()
    assert not outcome.done
    got: list[str] = []

    async def waiter() -> None:
        got.append((await outcome.wait()).status)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        outcome.set(RunResult(run_id="r", status="completed"))
    assert got == ["completed", "completed"]


async def test_an_owned_outcome_is_delivered_once_its_claim_is_released() -> None:
    # Whoever sees a claimed run's result may act on the run at once: the result waits
    # for the claim's release (RunControl.forget starts it once the outcome is done).
    from runtime.control._owned_outcome import OwnedOutcome

    outcome = OwnedOutcome(None, lambda _error: None)
    got: list[str] = []

    async def waiter() -> None:
        got.append((await outcome.wait()).status)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        outcome.set(RunResult(run_id="r", status="completed"))
        await anyio.wait_all_tasks_blocked()
        assert outcome.done and got == []
        outcome.released()
    assert got == ["completed"]
    assert (await outcome.wait()).status == "completed"  # a later wait: at once


async def test_every_run_records_the_whole_graph(tmp_path: Path) -> None:
    # RunStarted's graph dict is computed once per GraphSpec and shared by its runs: each
    # run's log must still hold the whole graph, in its compact form (defaults left out),
    # which reads back as the same graph with the same hash.
    from runtime.spec._load import graph_from_dict
    from runtime.spec._model import compact_graph_dict, graph_hash

    async with Runtime(tmp_path / "runs.db", functions={"step": _step}) as rt:
        handles = [await rt.start(GRAPH, input={"x": i}) for i in range(3)]
        for handle in handles:
            await handle.result()
        states = [await rt.get_state(handle.run_id) for handle in handles]
    assert [s.graph for s in states] == [compact_graph_dict(GRAPH)] * 3
    assert states[0].graph is not None
    assert "max_iterations" not in msgspec.json.encode(states[0].graph).decode()
    assert graph_from_dict(states[0].graph) == GRAPH
    assert [s.graph_hash for s in states] == [graph_hash(GRAPH)] * 3
    assert [s.memory["x"] for s in states] == [4, 5, 6]


async def test_a_commit_that_meets_another_writers_input_rereads_the_log_and_continues(
    tmp_path: Path,
) -> None:
    # Another writer appends an input to the run while node "a" runs: the executor's next
    # commit meets the fence (ConcurrencyError), so it writes nothing, reads the log and
    # obeys it. An input lets the run go on: "a" runs again (its first completion was never
    # recorded), sees the input, and the log holds each completion exactly once.
    from eventstore import SqliteEventStore
    from runtime.events import InputInjected, NodeCompleted

    gate = anyio.Event()
    entered = anyio.Event()
    ran: list[str] = []

    async def held(inputs: dict[str, Any]) -> dict[str, Any]:
        ran.append("held")
        entered.set()
        await gate.wait()
        return {"x": 1}

    async def after(inputs: dict[str, Any]) -> dict[str, Any]:
        ran.append("after")
        return {"x": 2}

    graph = GraphSpec(
        id="two",
        nodes=[NodeSpec(id="a", function="held"), NodeSpec(id="b", function="after")],
        edges=[EdgeSpec(source="a", target="b")],
        entry_node="a",
    )
    path = tmp_path / "runs.db"
    async with Runtime(path, functions={"held": held, "after": after}) as rt:
        handle = await rt.start(graph, input={})
        with anyio.fail_after(10):
            await entered.wait()
        async with SqliteEventStore(path) as other:
            last = (await other.read_all(handle.run_id))[-1].seq
            await other.append(handle.run_id, [InputInjected(data={"y": 1})], expected_seq=last)
        gate.set()
        with anyio.fail_after(10):
            result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed"
    assert result.memory == {"y": 1, "x": 2}
    assert ran == ["held", "held", "after"]
    completed = [e.body.node_id for e in events if isinstance(e.body, NodeCompleted)]
    assert completed == ["a", "b"]


async def test_a_run_whose_graph_no_longer_has_its_recorded_hash_resumes_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As if a release changed a default after the run started: the compact graph in the
    # log reads back as another graph than the one hashed at the start.
    from eventstore import SqliteEventStore
    from runtime.events import NodeStarted, RunStarted
    from runtime.spec._model import compact_graph_dict, graph_hash

    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:
        stale = "0" * 64
        assert graph_hash(GRAPH) != stale
        started = RunStarted(
            graph=compact_graph_dict(GRAPH), graph_hash=stale, entry="n0", input={"x": 0}
        )
        await store.append("crashed", [started, NodeStarted(node_id="n0", visit=1)], expected_seq=0)
    caplog.set_level("WARNING", logger="magistrate.runtime")
    async with Runtime(path, functions={"step": _step}) as rt:
        result = await (await rt.resume("crashed")).result()
    assert result.status == "completed"
    assert result.memory["x"] == 4
    warnings = [r for r in caplog.records if r.name == "magistrate.runtime"]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "crashed" in message and stale in message and graph_hash(GRAPH) in message


async def test_a_run_whose_graph_has_its_recorded_hash_resumes_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paused = GraphSpec(
        id="chain",
        nodes=GRAPH.nodes,
        edges=GRAPH.edges,
        entry_node="n0",
        pause_nodes=["n2"],
    )
    caplog.set_level("WARNING", logger="magistrate.runtime")
    async with Runtime(tmp_path / "runs.db", functions={"step": _step}) as rt:
        first = await (await rt.start(paused, input={"x": 0})).result()
        assert first.status == "paused"
        approved = await rt.approve(first.run_id, by="ann")
        assert approved is not None
        result = await approved.result()
    assert result.status == "completed"
    assert result.memory["x"] == 4
    assert [r for r in caplog.records if r.name == "magistrate.runtime"] == []
