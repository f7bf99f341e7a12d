"""Watching runs from an app: RunHandle.events() and Runtime.watch_runs(), on a real SQLite
file and on PostgreSQL, with a second runtime on its own store connection standing in for
another process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from eventstore import EventStore, PostgresEventStore, SqliteEventStore, event_tag
from runtime import EdgeSpec, GraphSpec, NodeSpec, RunChange, RunStateError, Runtime
from runtime.events import Verdict
from runtime.testing import ScriptedProvider, function_node, linear_graph, reply, tool_call
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio

FUNCTIONS = {"f": lambda inputs: {"x": 1}, "g": lambda inputs: {"y": 2}}
PAUSING = GraphSpec(
    id="pausing",
    nodes=[
        NodeSpec(id="a", function="f", output_keys=["x"]),
        NodeSpec(id="b", function="g", output_keys=["y"]),
    ],
    edges=[EdgeSpec(source="a", target="b")],
    entry_node="a",
    pause_nodes=["b"],
)
SHORT = linear_graph([function_node("a", "f", output_keys=["x"])])


def _judged() -> tuple[GraphSpec, ScriptedProvider]:
    node = NodeSpec(id="quote", kind="llm", output_keys=["eur"], success_criteria=["a number"])
    model = ScriptedProvider(
        [
            reply("", tool_call("set_output", key="eur", value="lots")),
            reply("done"),
            reply("", tool_call("set_output", key="eur", value=92.0)),
            reply("done"),
        ],
        judge=[
            '{"verdict": "RETRY", "feedback": "eur must be a number"}',
            '{"verdict": "ACCEPT", "confidence": 0.95}',
        ],
    )
    return linear_graph([node]), model


StoreFactory = Callable[[], EventStore]


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Unopened stores on one log: each call is a new connection to it."""
    if request.param == "sqlite":
        yield lambda: SqliteEventStore(tmp_path / "watch.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield lambda: PostgresEventStore(url, schema=f"{prefix}_watch")
    drop_schemas(prefix)


async def test_events_yield_every_committed_event_and_end_with_the_run(
    stores: StoreFactory,
) -> None:
    graph, model = _judged()
    async with stores() as store, Runtime(store, provider=model) as rt:
        handle = await rt.start(graph)
        seen = [event async for event in handle.events()]
        result = await handle.result()
        stored = await rt.read_events(handle.run_id)
    assert result.status == "completed"
    assert seen == stored  # every one, in order, the last the run's end
    assert event_tag(seen[-1].body) == "run.finished"
    verdicts = [(e.body.action, e.body.level) for e in seen if isinstance(e.body, Verdict)]
    assert ("retry", "quality") in verdicts and verdicts[-1] == ("accept", "quality")


async def test_events_from_a_seq_start_there(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "w.db", functions=FUNCTIONS) as rt:
        handle = await rt.start(SHORT)
        await handle.result()
        tail = [event async for event in handle.events(from_seq=3)]
        stored = await rt.read_events(handle.run_id)
    assert len(stored) > 3 and tail == stored[2:]


async def test_events_in_memory_follow_the_run_too() -> None:
    async with Runtime(functions=FUNCTIONS) as rt:
        handle = await rt.start(SHORT)
        seen = [event_tag(event.body) async for event in handle.events()]
    assert seen[0] == "run.started" and seen[-1] == "run.finished"


async def test_events_end_at_a_pause_and_a_resumed_handle_goes_past_it(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "w.db", functions=FUNCTIONS) as rt:
        first = await rt.start(PAUSING)
        before = [event_tag(e.body) async for e in first.events()]
        second = await rt.approve(first.run_id, input={"ok": True}, by="ann")
        assert second is not None
        after = [event_tag(e.body) async for e in second.events()]
        result = await second.result()
    assert before[-1] == "run.paused" and "run.finished" not in before
    assert result.status == "completed"
    assert after[: len(before)] == before  # from the start, past the earlier pause
    assert after[-1] == "run.finished" and after.count("run.paused") == 1


async def test_watch_runs_starts_at_the_store_head_and_sees_other_processes(
    stores: StoreFactory,
) -> None:
    async with (
        stores() as store,
        stores() as other_store,
        Runtime(store, functions=FUNCTIONS) as rt,
        Runtime(other_store, functions=FUNCTIONS) as other,
    ):
        old = await (await rt.start(PAUSING)).result()  # started and paused before watching
        earlier = {old.run_id}
        for _ in range(30):  # many changes before anyone watches
            earlier.add((await (await rt.start(SHORT)).result()).run_id)
        changes: list[RunChange] = []
        seen_one = anyio.Event()
        old_done = anyio.Event()

        async def watch() -> None:
            async for change in rt.watch_runs():
                changes.append(change)
                seen_one.set()
                if change.run_id == old.run_id and change.status == "completed":
                    old_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            # The watch starts at the head it reads when it starts iterating; runs started
            # by the other runtime until it reports one prove it is following.
            for _ in range(100):
                await (await other.start(SHORT)).result()
                with anyio.move_on_after(0.2):
                    await seen_one.wait()
                if seen_one.is_set():
                    break
            resumed = await other.approve(old.run_id, input={"ok": True}, by="ann")
            assert resumed is not None
            await resumed.result()
            with anyio.fail_after(10):
                await old_done.wait()
            tg.cancel_scope.cancel()
    assert changes, "the watch saw nothing"
    of_old = [(c.type, c.status) for c in changes if c.run_id == old.run_id]
    assert of_old == [("run.resumed", "running"), ("run.finished", "completed")]
    by_run: dict[str, list[str | None]] = {}
    for change in changes:
        by_run.setdefault(change.run_id, []).append(change.status)
    assert not (set(by_run) - {old.run_id}) & earlier  # nothing from before it started
    assert len(by_run) >= 2
    assert all(statuses[-1] == "completed" for statuses in by_run.values())
    positions = [c.position for c in changes]
    assert positions == sorted(positions)
    assert all(c.status is not None for c in changes)


async def test_watch_runs_every_event(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "w.db", functions=FUNCTIONS) as rt:
        head = await rt.store.head_position()  # type: ignore[union-attr]
        handle = await rt.start(SHORT)
        await handle.result()
        stored = await rt.read_events(handle.run_id)
        changes: list[RunChange] = []
        async for change in rt.watch_runs(after=head, every_event=True):
            changes.append(change)
            if change.type == "run.finished":
                break
    assert [(c.seq, c.type) for c in changes] == [(e.seq, event_tag(e.body)) for e in stored]
    assert {c.type for c in changes if c.status is None} >= {"node.completed"}


async def test_watch_runs_needs_a_store() -> None:
    async with Runtime() as rt:
        with pytest.raises(RunStateError):
            rt.watch_runs()
