"""Runtime.resume(run, graph=NEW): a run at rest moves to a new graph only when its replay
against it diverges nowhere (or with force), recorded as one graph.replaced event; the
resume and the listing then follow the new graph."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import event_tag
from runtime import EdgeSpec, GraphChangeRefused, GraphSpec, NodeSpec, RunStateError, Runtime
from runtime.events import GraphReplaced, describe_event
from runtime.spec import graph_hash

pytestmark = pytest.mark.anyio

go_on = anyio.Event()


async def add(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs.get("x", 0) + 1}


async def slow_add(inputs: dict[str, Any]) -> dict[str, Any]:
    await go_on.wait()
    return {"x": inputs.get("x", 0) + 1}


async def double(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs.get("x", 0) * 2}


FUNCTIONS = {"add": add, "slow_add": slow_add, "double": double}


def chain(*functions: str, graph_id: str = "deploy") -> GraphSpec:
    ids = [f"n{i}" for i in range(len(functions))]
    return GraphSpec(
        id=graph_id,
        nodes=[NodeSpec(id=i, function=f) for i, f in zip(ids, functions, strict=True)],
        edges=[EdgeSpec(source=a, target=b) for a, b in itertools.pairwise(ids)],
        entry_node="n0",
    )


OLD = chain("add", "slow_add", "add")


async def paused_run(rt: Runtime) -> str:
    """A run of OLD paused by its user after n1 (before n2)."""
    global go_on
    go_on = anyio.Event()
    handle = await rt.start(OLD, input={"x": 0})
    await anyio.sleep(0.05)  # n1 is waiting
    await rt.pause(handle.run_id)
    go_on.set()
    result = await handle.result()
    assert result.status == "paused" and result.resume_at == ["n2"]
    return handle.run_id


async def test_a_paused_run_moves_to_a_graph_its_replay_agrees_with(tmp_path: Path) -> None:
    new = chain("add", "slow_add", "double", "add")  # n2 changed, n3 added: not yet reached
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        run_id = await paused_run(rt)
        before = len(await rt.read_events(run_id))
        # Where the user paused it is where it rests: a replay compares what it did.
        assert (await rt.replay(run_id)).equal and (await rt.replay(run_id, new)).equal
        result = await (await rt.resume(run_id, graph=new)).result()
        assert result.status == "completed" and result.memory["x"] == 2 * 2 + 1
        events = await rt.read_events(run_id)
        [moved] = [e for e in events if isinstance(e.body, GraphReplaced)]
        assert moved.seq == before + 1  # appended at the run's rest, before the resume
        body = moved.body
        assert isinstance(body, GraphReplaced)
        assert (body.graph_hash, body.previous_hash) == (graph_hash(new), graph_hash(OLD))
        assert not body.forced and body.divergences == 0
        _node, _label, detail = describe_event(moved)
        assert detail == f"moved to graph deploy ({graph_hash(new)[:12]})"
        state = await rt.get_state(run_id)
        assert state.graph_hash == graph_hash(new) and state.path == ["n0", "n1", "n2", "n3"]
        assert rt.store is not None
        [row] = [r for r in (await rt.store.list_runs()) if r.run_id == run_id]
        assert row.graph_hash == graph_hash(new)
        # Replaying the moved run against its new graph finds nothing to report.
        assert (await rt.replay(run_id, new)).equal


async def test_a_graph_that_decides_otherwise_is_refused_unless_forced(tmp_path: Path) -> None:
    # n0 must now return y: its recorded outputs (x) fail that check, so the run would
    # not have gone past n0 the way it did.
    first = NodeSpec(id="n0", function="add", output_keys=["y"])
    new = msgspec.structs.replace(OLD, nodes=[first, *OLD.nodes[1:]])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        run_id = await paused_run(rt)
        before = await rt.read_events(run_id)
        with pytest.raises(GraphChangeRefused, match="diverged at seq") as refused:
            await rt.resume(run_id, graph=new)
        assert refused.value.report.divergences
        assert await rt.read_events(run_id) == before  # nothing recorded
        assert (await rt.get_state(run_id)).status == "paused"

        result = await (await rt.resume(run_id, graph=new, force=True)).result()
        assert result.status == "completed"
        moved = next(
            e.body for e in await rt.read_events(run_id) if isinstance(e.body, GraphReplaced)
        )
        assert moved.forced and moved.divergences == len(refused.value.report.divergences)


async def test_the_same_graph_records_nothing_and_a_finished_run_is_refused(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        run_id = await paused_run(rt)
        same = msgspec.structs.replace(OLD)  # an equal spec built anew
        result = await (await rt.resume(run_id, graph=same)).result()
        assert result.status == "completed"
        tags = [event_tag(type(e.body)) for e in await rt.read_events(run_id)]
        assert "graph.replaced" not in tags
        with pytest.raises(RunStateError, match="finished run cannot be resumed"):
            await rt.resume(run_id, graph=chain("add", "add", "add"))
