"""Runtime.fork: a new run from a copy of another run's first events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eventstore import SqliteEventStore, event_tag
from runtime import RunNotFoundError, RunStateError, Runtime
from runtime.events import (
    InputInjected,
    NodeCompleted,
    NodeStarted,
    RunFinished,
    RunForked,
    RunResumed,
    fold,
)
from runtime.testing import function_node, linear_graph

pytestmark = pytest.mark.anyio


def _functions(calls: list[str]) -> dict[str, Any]:
    async def plan(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("plan")
        return {"plan": f"trip to {inputs.get('city', '?')}"}

    async def book(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("book")
        return {"booked": inputs.get("plan"), "approved": inputs.get("approved")}

    async def report(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("report")
        return {"report": f"{inputs.get('booked')} ({inputs.get('approved')})"}

    return {"plan": plan, "book": book, "report": report}


GRAPH = linear_graph(
    [
        function_node("plan", input_keys=["city"], output_keys=["plan"]),
        function_node(
            "book",
            input_keys=["plan", "approved"],
            output_keys=["booked", "approved"],
            nullable_keys=["approved"],
        ),
        function_node("report", input_keys=["booked", "approved"], output_keys=["report"]),
    ],
    graph_id="trip",
    pause_nodes=["book"],
)


def _seq_of(events: list[Any], cls: type, node: str) -> int:
    return next(e.seq for e in events if type(e.body) is cls and e.body.node_id == node)


async def test_a_fork_copies_the_prefix_records_its_source_and_runs_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    calls: list[str] = []
    async with Runtime(db, functions=_functions(calls)) as rt:
        paused = await (await rt.start(GRAPH, input={"city": "Lyon"})).result()
        assert paused.status == "paused"
        source = await rt.read_events(paused.run_id)
        at = source[-1].seq  # the pause itself
        handle = await rt.fork(paused.run_id, at, input={"approved": "ops"})
        waiting = await handle.result()
        # The fork waits at the gate the source waited at: only an approval passes it.
        assert (waiting.status, waiting.paused_reason, waiting.resume_at) == (
            "paused",
            "hitl",
            ["book"],
        )
        approved = await rt.approve(handle.run_id, by="ops")
        assert approved is not None
        result = await approved.result()
    assert handle.run_id != paused.run_id
    assert result.status == "completed" and result.quality == "clean"
    assert result.memory["report"] == "trip to Lyon (ops)"
    assert calls == ["plan", "book", "report"]  # plan is not run again in the fork

    async with SqliteEventStore(db) as store:
        forked = await store.read_all(handle.run_id)
        assert (await store.verify(handle.run_id)).ok
        assert (await store.verify(paused.run_id)).ok
        after = await store.read_all(paused.run_id)
    assert [e.body for e in forked[:at]] == [e.body for e in source]
    assert all(e.run_id == handle.run_id for e in forked)
    # Re-chained: the same bodies under a new run id hash differently.
    assert forked[0].hash != source[0].hash
    marker = forked[at].body
    assert isinstance(marker, RunForked) and event_tag(marker) == "run.forked"
    assert (marker.source_run_id, marker.source_seq) == (paused.run_id, at)
    assert marker.source_hash == source[at - 1].hash
    assert type(forked[at + 1].body) is RunResumed
    assert forked[at + 2].body == InputInjected(data={"approved": "ops"})
    # Time travel on the fork before the marker equals time travel on the source.
    assert fold(forked[:at]).memory == fold(source).memory
    # The source is untouched: still paused, same events.
    assert [e.hash for e in after] == [e.hash for e in source]
    assert fold(after).status == "paused"


async def test_a_fork_reruns_a_node_that_had_started_but_not_completed(tmp_path: Path) -> None:
    graph = linear_graph(["plan", "book", "report"], graph_id="plain")
    calls: list[str] = []
    db = tmp_path / "runs.db"
    async with Runtime(db, functions=_functions(calls)) as rt:
        done = await (await rt.start(graph, input={"city": "Oslo"})).result()
        assert done.status == "completed"
        events = await rt.read_events(done.run_id)
        at = _seq_of(events, NodeStarted, "book")
        calls.clear()
        forked = await (await rt.fork(done.run_id, at)).result()
        assert forked.status == "completed"
        assert calls == ["book", "report"]
        assert forked.memory == done.memory
        state = await rt.get_state(forked.run_id)
        assert state.path == ["plan", "book", "report"]


async def test_forking_from_the_middle_of_a_finished_run_twice_gives_two_runs(
    tmp_path: Path,
) -> None:
    graph = linear_graph(["plan", "book", "report"], graph_id="plain")
    calls: list[str] = []
    async with Runtime(tmp_path / "runs.db", functions=_functions(calls)) as rt:
        done = await (await rt.start(graph, input={"city": "Rome"})).result()
        events = await rt.read_events(done.run_id)
        at = _seq_of(events, NodeCompleted, "plan") + 1  # the edge plan -> book
        one = await (await rt.fork(done.run_id, at, input={"city": "ignored"})).result()
        two = await (await rt.fork(done.run_id, at)).result()
        assert one.run_id != two.run_id
        assert one.memory["city"] == "ignored" and two.memory["city"] == "Rome"
        assert one.memory["plan"] == two.memory["plan"] == "trip to Rome"
        assert one.path == two.path == ["plan", "book", "report"]
        runs = {info.run_id for info in await rt.store.list_runs()}  # type: ignore[union-attr]
        assert {done.run_id, one.run_id, two.run_id} <= runs


async def test_fork_refuses_bad_seqs_finished_prefixes_and_unknown_runs(tmp_path: Path) -> None:
    graph = linear_graph(["plan", "report"], graph_id="plain")
    async with Runtime(tmp_path / "runs.db", functions=_functions([])) as rt:
        done = await (await rt.start(graph)).result()
        events = await rt.read_events(done.run_id)
        last = events[-1].seq
        assert type(events[-1].body) is RunFinished
        for bad in (0, -1, last + 1):
            with pytest.raises(RunStateError, match="cannot fork at seq"):
                await rt.fork(done.run_id, bad)
        with pytest.raises(RunStateError, match="finished at seq"):
            await rt.fork(done.run_id, last)
        inside = _seq_of(events, NodeCompleted, "plan")  # its edge comes next
        with pytest.raises(RunStateError, match="edge is not taken yet"):
            await rt.fork(done.run_id, inside)
        with pytest.raises(RunNotFoundError):
            await rt.fork("no-such-run", 1)
        assert len(await rt.store.list_runs()) == 1  # type: ignore[union-attr]


async def test_fork_works_on_an_in_memory_runtime() -> None:
    calls: list[str] = []
    async with Runtime(None, functions=_functions(calls)) as rt:
        paused = await (await rt.start(GRAPH, input={"city": "Kyiv"})).result()
        at = (await rt.get_state(paused.run_id)).last_seq
        fork = await (await rt.fork(paused.run_id, at, input={"approved": "me"})).result()
        assert fork.status == "paused"
        approved = await rt.approve(fork.run_id, by="me")
        assert approved is not None
        result = await approved.result()
        assert result.status == "completed"
        assert result.memory["report"] == "trip to Kyiv (me)"
        events = await rt.read_events(result.run_id)
        assert isinstance(events[at].body, RunForked)
        assert events[at].body.source_hash == ""


async def test_a_fork_from_before_a_pause_gate_stops_at_the_gate(tmp_path: Path) -> None:
    """Forked at the edge into a pause node (before the run paused there), the fork pauses
    at that node too: a fork never runs a gated node nobody approved."""
    calls: list[str] = []
    async with Runtime(tmp_path / "runs.db", functions=_functions(calls)) as rt:
        paused = await (await rt.start(GRAPH, input={"city": "Lyon"})).result()
        assert paused.status == "paused"
        events = await rt.read_events(paused.run_id)
        edge = _seq_of(events, NodeCompleted, "plan") + 1  # the edge plan -> book
        assert events[edge - 1].body.target == "book"  # type: ignore[attr-defined]
        calls.clear()
        fork = await (await rt.fork(paused.run_id, edge, input={"city": "Nice"})).result()
        assert fork.status == "paused" and calls == []
        state = await rt.get_state(fork.run_id)
        assert state.paused is not None and state.paused.node_id == "book"
        # Approving the fork runs the gated node, once.
        approved = await rt.approve(fork.run_id, by="ops", input={"approved": "ops"})
        assert approved is not None
        done = await approved.result()
        assert done.status == "completed" and calls == ["book", "report"]
        assert done.memory["report"] == "trip to Lyon (ops)"


async def test_a_fork_copied_before_a_gate_meets_it_whoever_resumes_it(tmp_path: Path) -> None:
    """The gate is the log's to tell, not the fork call's: a copy written and then resumed
    by a plain resume (as recovery would, after a crash between the two) pauses too."""
    from runtime._fork import copy_prefix
    from runtime._run_logs import RunLogs

    calls: list[str] = []
    async with Runtime(tmp_path / "runs.db", functions=_functions(calls)) as rt:
        paused = await (await rt.start(GRAPH, input={"city": "Lyon"})).result()
        events = await rt.read_events(paused.run_id)
        edge = _seq_of(events, NodeCompleted, "plan") + 1
        new_id = await copy_prefix(RunLogs(rt.store), paused.run_id, edge)
        copied = await rt.get_state(new_id)
        assert copied.gates_due and copied.pending == ["book"]
        calls.clear()
        again = await (await rt.resume(new_id)).result()
        assert again.status == "paused" and calls == []
        assert not (await rt.get_state(new_id)).gates_due  # the pause is on record now
        # A fork at the pause itself is the approval's to answer: no gate is due.
        at_pause = await copy_prefix(RunLogs(rt.store), paused.run_id, events[-1].seq)
        assert not (await rt.get_state(at_pause)).gates_due
