"""An open fan-out is part of a run's folded state: a run paused inside one, with a
snapshot taken inside it, resumes from the snapshot to the result it reaches without one,
and the fan-out the fold of the log gives equals the live one (a snapshot holds the live
state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from eventstore import event_tag
from runtime import EdgeSpec, GraphSpec, NodeSpec, RunResult, Runtime
from runtime.events import fold
from runtime.events._fanout import BranchWrite
from runtime.events._snapshots import SNAPSHOT_EVERY, decode_state

pytestmark = pytest.mark.anyio

LOOPS = SNAPSHOT_EVERY // 3  # a loop step writes ~4 events: branch a crosses a snapshot


def loop(inputs: dict[str, Any]) -> dict[str, Any]:
    n = int(inputs.get("n", 0)) + 1
    return {"n": n, "winner": "a"}


def early(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"early": True}


def late(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"winner": "b"}  # after branch a reached the join: first_wins drops it


def join(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"joined": inputs["winner"]}


FUNCTIONS = {"loop": loop, "early": early, "late": late, "join": join}


def graph() -> GraphSpec:
    """start forks into a (a loop of LOOPS steps) and b1 -> gate (a pause node) -> b2; both
    meet at join. The run pauses once a has reached the join and b waits at its gate."""
    return GraphSpec(
        id="fan",
        nodes=[
            NodeSpec(id="start", kind="function", function="early"),
            NodeSpec(id="a", kind="function", function="loop"),
            NodeSpec(id="b1", kind="function", function="early"),
            NodeSpec(id="gate", kind="function", function="early"),
            NodeSpec(id="b2", kind="function", function="late"),
            NodeSpec(id="join", kind="function", function="join"),
        ],
        edges=[
            EdgeSpec(source="start", target="a"),
            EdgeSpec(source="start", target="b1"),
            EdgeSpec(source="a", target="a", condition="conditional", expression=f"n < {LOOPS}"),
            EdgeSpec(
                source="a", target="join", condition="conditional", expression=f"n >= {LOOPS}"
            ),
            EdgeSpec(source="b1", target="gate"),
            EdgeSpec(source="gate", target="b2"),
            EdgeSpec(source="b2", target="join"),
        ],
        entry_node="start",
        pause_nodes=["gate"],
        conflict_strategy="first_wins",
        max_steps=LOOPS + 20,
    )


async def paused_run(path: Path) -> str:
    async with Runtime(path, functions=FUNCTIONS) as rt:
        result = await (await rt.start(graph())).result()
    assert result.status == "paused" and result.resume_at == ["gate"]
    return result.run_id


async def resume(path: Path, run_id: str) -> tuple[RunResult, list[str], int | None]:
    """The run approved and resumed to its end: its result, the tags of its events but
    ``snapshot.taken``, and its snapshot's seq (None: it has none)."""
    async with Runtime(path, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        approved = await rt.approve(run_id, by="ann")
        assert approved is not None
        result = await approved.result()
        events = await rt.read_events(run_id)
        snapshot = await rt.store.load_snapshot(run_id)
    assert fold(events).fanout is None  # joined
    tags = [event_tag(type(e.body)) for e in events]
    return result, [t for t in tags if t != "snapshot.taken"], snapshot and snapshot.seq


async def test_a_run_paused_inside_a_fan_out_resumes_through_its_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    run_id = await paused_run(path)
    async with Runtime(path, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        events = await rt.read_events(run_id)
        snapshot = await rt.store.load_snapshot(run_id)
        # The snapshot was taken inside the fan-out (as the run paused there), from the
        # live state: it is the fold.
        assert snapshot is not None and 3 < snapshot.seq <= len(events)
        live = decode_state(snapshot.data)
        assert live.fanout is not None
        # A live state records the last seq only (see RunState).
        folded = fold(events[: snapshot.seq])
        assert live == msgspec.structs.replace(folded, last_hash="", last_position=0)
        through_snapshot = await rt.get_state(run_id)
        assert through_snapshot == fold(events)
    fan = through_snapshot.fanout
    assert fan is not None and fan.source == "start" and fan.join == "join"
    assert fan.branches == {"a": "done", "b1": "running"}
    assert fan.arrived == ["a"]
    assert fan.node_branch["gate"] == "b1" and fan.node_branch["a"] == "a"
    assert fan.first_writer == {"n": "a", "winner": "a", "early": "b1"}
    assert fan.values["a"]["n"] == BranchWrite(value=LOOPS, node_id="a")

    # Resumed through the snapshot, and with every snapshot gone (the whole log folded).
    copy = tmp_path / "copy.db"
    copy.write_bytes(path.read_bytes())
    with_snapshot, logged, kept = await resume(path, run_id)
    async with Runtime(copy, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        await rt.store.delete_snapshots(run_id)
    without, logged_without, seq = await resume(copy, run_id)
    assert with_snapshot.status == without.status == "completed"
    # first_wins: branch a reached the join first, so b2's later write of winner is dropped.
    assert with_snapshot.memory["winner"] == "a" and with_snapshot.memory["joined"] == "a"
    assert with_snapshot.memory == without.memory
    assert with_snapshot.path == without.path and with_snapshot.path[-2:] == ["b2", "join"]
    # The same events but the snapshots: the run whose snapshot was deleted gets another
    # with its first batch, past SNAPSHOT_EVERY events since its start.
    assert logged == logged_without
    assert kept == snapshot.seq  # a few events after it: the resumed run took none
    assert seq is not None and seq > len(events) > SNAPSHOT_EVERY
