"""Snapshots are a cache: reads through them equal the fold of the whole log, and a snapshot
that does not match the log or the fold is ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from eventstore import Snapshot, SqliteEventStore, event_tag
from runtime import EdgeSpec, GraphSpec, MemoryKey, NodeContext, NodeSpec, Runtime
from runtime.events import fold
from runtime.events._snapshots import (
    FOLD_VERSION,
    SNAPSHOT_AT_REST,
    SNAPSHOT_AT_REST_BYTES,
    SNAPSHOT_EVERY,
    encode_state,
    worth_at_rest,
)

pytestmark = pytest.mark.anyio

STEPS = SNAPSHOT_EVERY // 3  # a step writes ~5 events: the run crosses a snapshot


def count(inputs: dict[str, Any]) -> dict[str, Any]:
    n = int(inputs.get("n", 0)) + 1
    return {"n": n, "seen": n}


def graph() -> GraphSpec:
    return GraphSpec(
        id="loop",
        nodes=[
            NodeSpec(id="count", kind="function", function="count"),
            NodeSpec(id="gate", kind="function", function="count"),
        ],
        edges=[
            EdgeSpec(
                source="count", target="count", condition="conditional", expression=f"n < {STEPS}"
            ),
            EdgeSpec(source="count", target="gate", condition="always"),
        ],
        entry_node="count",
        pause_nodes=["gate"],
        max_steps=STEPS + 10,
        memory=[MemoryKey(name="seen", reducer="append")],
    )


async def paused_run(path: Path) -> str:
    async with Runtime(path, functions={"count": count}) as rt:
        handle = await rt.start(graph())
        result = await handle.result()
    assert result.status == "paused" and result.resume_at == ["gate"]
    return handle.run_id


async def test_a_long_run_is_read_through_its_snapshot_with_the_same_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    run_id = await paused_run(path)
    async with Runtime(path, functions={"count": count}) as rt:
        assert rt.store is not None
        snapshot = await rt.store.load_snapshot(run_id)
        assert snapshot is not None and snapshot.version == FOLD_VERSION
        events = await rt.read_events(run_id)
        # The run's owner saved one with the batch that paused it (the newest replaces
        # the one taken past SNAPSHOT_EVERY events): a run at rest is read as its snapshot
        # and no tail.
        assert snapshot.seq == len(events) > SNAPSHOT_EVERY
        assert [event_tag(type(e.body)) for e in events[-2:]] == ["run.paused", "snapshot.taken"]
        assert events[snapshot.seq - 1].hash == snapshot.hash
        whole = fold(events)
        assert await rt.get_state(run_id) == whole
        assert await rt.get_state(run_id, at_seq=100) == fold(events[:100])
        assert await rt.store.delete_snapshots(run_id) == 1
        assert await rt.get_state(run_id) == whole  # folds the whole log
        # A read saves none: only the run's owner appends the event that binds one.
        assert await rt.store.load_snapshot(run_id) is None
        approved = await rt.approve(run_id, by="ann")
        assert approved is not None
        result = await approved.result()
        assert result.status == "completed" and result.memory["n"] == STEPS + 1
        assert result.memory["seen"] == list(range(1, STEPS + 2))
        assert await rt.get_state(run_id) == fold(await rt.read_events(run_id))


async def test_a_snapshot_that_does_not_match_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = await paused_run(path)
    async with SqliteEventStore(path) as store:
        events = await store.read_all(run_id)
        whole = fold(events)
        wrong = fold(events[:10])
        wrong.memory["n"] = -1
        forged = [
            # Another fold's version, the right hash: ignored.
            Snapshot(run_id, len(events), events[-1].hash, "0.old", encode_state(wrong)),
            # This fold's version, a hash the log does not have at that seq: ignored.
            Snapshot(run_id, len(events), "00" * 32, FOLD_VERSION, encode_state(wrong)),
            # Undecodable data under the right version and hash: ignored.
            Snapshot(run_id, len(events), events[-1].hash, FOLD_VERSION, b"\x00garbage"),
        ]
    for snapshot in forged:
        async with Runtime(path, functions={"count": count}) as rt:
            assert rt.store is not None
            await rt.store.save_snapshot(snapshot)
            assert await rt.get_state(run_id) == whole
            assert (await rt.get_state(run_id)).memory["n"] == STEPS


async def progress(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    for i in range(SNAPSHOT_EVERY + 100):  # one awaited append of the node's per output
        await ctx.set_output("done", i)
    return {"n": 1}


def progress_graph() -> GraphSpec:
    return GraphSpec(
        id="progress",
        nodes=[
            NodeSpec(id="work", kind="function", function="progress"),
            NodeSpec(id="gate", kind="function", function="count"),
        ],
        edges=[EdgeSpec(source="work", target="gate", condition="always")],
        entry_node="work",
        pause_nodes=["gate"],
    )


@pytest.mark.parametrize("path_name", ["submitted", "written behind", "awaited"])
async def test_every_append_path_saves_snapshots_and_deleting_them_changes_nothing(
    tmp_path: Path, path_name: str
) -> None:
    spec = progress_graph() if path_name == "awaited" else graph()
    if path_name == "written behind":
        spec = msgspec.structs.replace(spec, durability="async")
    path = tmp_path / "runs.db"
    functions = {"count": count, "progress": progress}
    async with Runtime(path, functions=functions) as rt:
        assert rt.store is not None
        paused = await (await rt.start(spec)).result()
        assert paused.status == "paused"
        run_id = paused.run_id
        events = await rt.read_events(run_id)
        assert len(events) > SNAPSHOT_EVERY
        snapshot = await rt.store.load_snapshot(run_id)
        assert snapshot is not None and snapshot.version == FOLD_VERSION
        assert snapshot.seq >= SNAPSHOT_EVERY
        assert events[snapshot.seq - 1].hash == snapshot.hash
        through_snapshot = await rt.get_state(run_id)
        assert through_snapshot == fold(events)
    # A resume from the stored snapshot and one without any end alike.
    results = []
    for keep in (True, False):
        copy = tmp_path / f"copy-{keep}.db"
        async with Runtime(path, functions=functions) as rt:
            assert rt.store is not None
            if not keep:
                await rt.store.delete_snapshots(run_id)
            assert (await rt.store.load_snapshot(run_id) is not None) == keep
        copy.write_bytes(path.read_bytes())
        async with Runtime(copy, functions=functions) as rt:
            approved = await rt.approve(run_id, by="ann")
            assert approved is not None
            result = await approved.result()
            assert result.status == "completed"
            results.append((result, fold(await rt.read_events(run_id))))
    (with_snapshot, log_with), (without, log_without) = results
    assert with_snapshot.memory == without.memory and with_snapshot.path == without.path
    assert log_with.memory == log_without.memory and log_with.path == log_without.path


def short_loop(steps: int, durability: str) -> GraphSpec:
    spec = graph()
    edges = [
        EdgeSpec(source="count", target="count", condition="conditional", expression=f"n < {steps}")
    ]
    return msgspec.structs.replace(
        spec,
        nodes=spec.nodes[:1],
        edges=edges,
        pause_nodes=[],
        terminal_nodes=[],
        max_steps=steps + 10,
        durability=durability,
    )


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_run_that_ends_has_its_snapshot_in_the_commit_that_ends_it(
    tmp_path: Path, durability: str
) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path, functions={"count": count}) as rt:
        assert rt.store is not None
        long = await (await rt.start(short_loop(60, durability))).result()
        short = await (await rt.start(short_loop(5, durability))).result()
        assert long.status == short.status == "completed"
        # Read at once after the result: the snapshot and its event are already there.
        at_result = await rt.read_events(long.run_id)
        snapshot = await rt.store.load_snapshot(long.run_id)
        assert snapshot is not None and snapshot.seq == len(at_result) > SNAPSHOT_AT_REST
        tags = [event_tag(type(e.body)) for e in at_result[-2:]]
        assert tags == ["run.finished", "snapshot.taken"]
        # Same position: one commit wrote the run's end and its snapshot.
        assert at_result[-1].position == at_result[-2].position + 1
        # A short run is folded faster than a snapshot is read: it gets none.
        assert await rt.store.load_snapshot(short.run_id) is None
        assert event_tag(type((await rt.read_events(short.run_id))[-1].body)) == "run.finished"
    async with Runtime(path, functions={"count": count}) as rt:
        # Nothing was appended after the result was delivered.
        assert await rt.read_events(long.run_id) == at_result
        state = await rt.get_state(long.run_id)
        assert state == fold(at_result) and state.status == "completed"


async def test_a_snapshot_at_rest_is_worth_its_bytes_only_beside_the_events_it_spares() -> None:
    n, per = SNAPSHOT_AT_REST, SNAPSHOT_AT_REST_BYTES
    assert worth_at_rest(n, n * per, 0)
    assert not worth_at_rest(n - 1, 10, 0)  # a short tail is folded as fast
    assert not worth_at_rest(n, n * per + 1, 0)
    assert worth_at_rest(n, 10**6, 10**6 - n * per)  # replaces one about its size
    assert not worth_at_rest(n, 10**6, 10**6 - n * per - 1)


def payload_step(inputs: dict[str, Any]) -> dict[str, Any]:
    # Each step adds 2 KB to the list: the state grows as fast as the log.
    n = int(inputs.get("n", 0)) + 1
    return {"n": n, "seen": f"{n:04d}" + "x" * 2044}


def blob_step(inputs: dict[str, Any]) -> dict[str, Any]:
    # One large value written once, then small steps: a large state, a long tail.
    n = int(inputs.get("n", 0)) + 1
    return {"n": n, "seen": n} if n > 1 else {"n": n, "seen": n, "blob": "b" * 131072}


async def test_a_state_as_large_as_its_log_gets_no_snapshot_at_rest(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    functions = {"count": count, "payload": payload_step, "blob": blob_step}
    async with Runtime(path, functions=functions) as rt:
        assert rt.store is not None
        ends = {}
        for function in functions:
            spec = short_loop(60, "sync")
            node = msgspec.structs.replace(spec.nodes[0], function=function)
            spec = msgspec.structs.replace(spec, nodes=[node])
            ends[function] = await (await rt.start(spec)).result()
            assert ends[function].status == "completed"
        events = {f: await rt.read_events(r.run_id) for f, r in ends.items()}
        snapshots = {f: await rt.store.load_snapshot(r.run_id) for f, r in ends.items()}
        assert all(SNAPSHOT_AT_REST < len(e) < SNAPSHOT_EVERY for e in events.values())
        # A long tail over a small state: read as its snapshot at rest and no tail.
        small = snapshots["count"]
        assert small is not None and small.seq == len(events["count"])
        assert len(small.data) <= len(events["count"]) * SNAPSHOT_AT_REST_BYTES
        # A state that grows with the log (each step's 2 KB in a memory list), or one
        # large beside its tail: a snapshot would store it again, so the log is folded.
        assert snapshots["payload"] is None and snapshots["blob"] is None
        for function in ("payload", "blob"):
            assert event_tag(type(events[function][-1].body)) == "run.finished"
            state = await rt.get_state(ends[function].run_id)
            assert state == fold(events[function]) and state.status == "completed"
            assert len(encode_state(state)) > len(events[function]) * SNAPSHOT_AT_REST_BYTES
        assert len((await rt.get_state(ends["payload"].run_id)).memory["seen"]) == 60


async def test_a_large_state_gets_its_snapshot_at_rest_when_it_replaces_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path, functions={"count": blob_step}) as rt:
        assert rt.store is not None
        handle = await rt.start(graph())
        paused = await handle.result()
        assert paused.status == "paused"
        events = await rt.read_events(handle.run_id)
        snapshot = await rt.store.load_snapshot(handle.run_id)
        # The state is large beside the tail since the periodic snapshot, but barely grew
        # since it: the snapshot at rest replaces it and the paused run is read with no tail.
        assert snapshot is not None and snapshot.seq == len(events) > SNAPSHOT_EVERY
        assert [event_tag(type(e.body)) for e in events[-2:]] == ["run.paused", "snapshot.taken"]
        taken = [e.seq for e in events if event_tag(type(e.body)) == "snapshot.taken"]
        assert len(taken) == 2 and snapshot.seq - taken[0] >= SNAPSHOT_AT_REST
        assert len(snapshot.data) > (snapshot.seq - taken[0]) * SNAPSHOT_AT_REST_BYTES
        assert await rt.get_state(handle.run_id) == fold(events)
