"""A run resumed again and again gets its snapshots as a run that never pauses does: a
resumed log counts from the snapshot its state was read through, and weighs one at rest
against the snapshot it replaces."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from eventstore import Event, event_tag
from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.events import fold
from runtime.events._snapshots import SNAPSHOT_AT_REST, SNAPSHOT_AT_REST_BYTES, SNAPSHOT_EVERY

pytestmark = pytest.mark.anyio

BLOB = 131_072  # one value, written once: a large state beside the events of one pause
STEPS_PER_PAUSE = 80  # about 4 events a step: 300 to 400 events between pauses


def step(inputs: dict[str, Any]) -> dict[str, Any]:
    n = int(inputs.get("n", 0)) + 1
    return {"n": n} if n > 1 else {"n": n, "blob": "b" * BLOB}


def gate(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


FUNCTIONS = {"step": step, "gate": gate}


def cycles() -> GraphSpec:
    """Steps until ``n`` reaches the memory's ``stop``, pauses at ``gate``, and again."""
    return GraphSpec(
        id="cycles",
        nodes=[
            NodeSpec(id="step", kind="function", function="step", max_iterations=10_000),
            NodeSpec(id="gate", kind="function", function="gate", max_iterations=10_000),
        ],
        edges=[
            EdgeSpec(source="step", target="step", condition="conditional", expression="n < stop"),
            EdgeSpec(source="step", target="gate", condition="always"),
            EdgeSpec(source="gate", target="step", condition="always"),
        ],
        entry_node="step",
        pause_nodes=["gate"],
        max_steps=100_000,
    )


async def go_on(rt: Runtime, run_id: str, steps: int) -> None:
    """Approve the gate the run waits at; it pauses there again after ``steps`` steps."""
    n = (await rt.get_state(run_id)).memory["n"]
    handle = await rt.approve(run_id, by="ann", input={"stop": n + steps})
    assert handle is not None
    assert (await handle.result()).status == "paused"


def taken(events: list[Event]) -> list[int]:
    return [e.seq for e in events if event_tag(type(e.body)) == "snapshot.taken"]


async def test_a_run_paused_every_few_hundred_events_gets_its_snapshots_across_resumes(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        assert rt.store is not None
        paused = await (await rt.start(cycles(), input={"stop": STEPS_PER_PAUSE})).result()
        assert paused.status == "paused"
        run_id = paused.run_id
        pauses = [len(await rt.read_events(run_id))]
        while pauses[-1] < 2 * SNAPSHOT_EVERY:
            await go_on(rt, run_id, STEPS_PER_PAUSE)
            events = await rt.read_events(run_id)
            pauses.append(len(events))
            assert await rt.get_state(run_id) == fold(events)
            snapshot = await rt.store.load_snapshot(run_id)
            if pauses[-1] > SNAPSHOT_EVERY:
                # Read at rest as its snapshot and a short tail, however often it resumed.
                assert snapshot is not None and events[snapshot.seq - 1].hash == snapshot.hash
                assert pauses[-1] - snapshot.seq < SNAPSHOT_AT_REST
        gaps = [b - a for a, b in pairwise(pauses)]
        assert all(300 <= gap <= 400 for gap in gaps)  # no resume ran SNAPSHOT_EVERY events
        # The state is too large for a snapshot at rest beside the events of one pause: the
        # first is the periodic one, its SNAPSHOT_EVERY events counted across the resumes.
        assert BLOB > SNAPSHOT_EVERY * SNAPSHOT_AT_REST_BYTES
        first = taken(events)[0]
        assert SNAPSHOT_EVERY < first < SNAPSHOT_EVERY + gaps[0]
        assert not any(first - 1 == end for end in pauses)  # not a pause's batch


async def test_a_run_resumed_soon_after_its_snapshot_gets_another_only_when_worth_it(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        assert rt.store is not None
        first = await (await rt.start(cycles(), input={"stop": 300})).result()
        run_id = first.run_id
        events = await rt.read_events(run_id)
        snapshot = await rt.store.load_snapshot(run_id)
        # Past SNAPSHOT_EVERY events, then at rest: read as its snapshot and no tail.
        assert snapshot is not None and snapshot.seq == len(events) > SNAPSHOT_EVERY
        # A few events since it: the run pauses without another.
        await go_on(rt, run_id, 10)
        events = await rt.read_events(run_id)
        assert len(events) - snapshot.seq < SNAPSHOT_AT_REST
        assert taken(events)[-1] == snapshot.seq
        assert await rt.store.load_snapshot(run_id) == snapshot
        assert await rt.get_state(run_id) == fold(events)
        # SNAPSHOT_AT_REST events since it over two resumes, the state about its size: the
        # one at rest replaces it.
        await go_on(rt, run_id, 15)
        events = await rt.read_events(run_id)
        assert len(events) - snapshot.seq >= SNAPSHOT_AT_REST
        again = await rt.store.load_snapshot(run_id)
        assert again is not None and again.seq == len(events)
        assert taken(events)[-2:] == [snapshot.seq, again.seq]
        assert await rt.get_state(run_id) == fold(events)
