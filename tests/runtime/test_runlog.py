"""The run log's append path: ordering, write-behind, accumulators and cancellation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import anyio
import pytest

from eventstore import (
    AppendResult,
    EventBody,
    EventStore,
    LeaseLostError,
    SnapshotAfter,
    SqliteEventStore,
)
from runtime.engine._runlog import RunLog, Submission
from runtime.events import NodeFailed, NodeStarted, OutputSet, fold

pytestmark = pytest.mark.anyio


class SlowStore:
    """Just enough of an EventStore: each append waits until ``release`` is set."""

    #: The EventStore protocol's heads file: this store keeps none.
    heads_file = None

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.appended: list[tuple[int | None, list[EventBody]]] = []

    async def append(
        self,
        run_id: str,
        events: Sequence[EventBody],
        *,
        expected_seq: int | None,
        snapshot: SnapshotAfter | None = None,
    ) -> Any:
        self.appended.append((expected_seq, list(events)))  # handed over at once
        await self.release.wait()
        first = (expected_seq or 0) + 1
        return AppendResult(first, first + len(events) - 1, 0, "")


@pytest.mark.parametrize("shield", [True, False])
async def test_a_cancelled_append_is_left_to_the_store_and_hooks_run_only_if_shielded(
    shield: bool,
) -> None:
    store = SlowStore()
    hooked: list[int] = []
    log = RunLog("r", store, hooks=[lambda run_id, seq, batch: hooked.append(seq)])  # type: ignore[arg-type]
    finished: list[int] = []
    scope = anyio.CancelScope()

    async def append() -> None:
        with scope:
            finished.append(await log.append([NodeStarted(node_id="a", visit=1)], shield=shield))

    async with anyio.create_task_group() as tg:
        tg.start_soon(append)
        await anyio.wait_all_tasks_blocked()  # waiting for the commit
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        store.release.set()
    assert store.appended == [(0, [NodeStarted(node_id="a", visit=1)])]
    assert log.last_seq == 1  # the next append continues after the handed-over batch
    if shield:
        assert finished == [1] and hooked == [1]  # the commit was awaited to its end
    else:
        assert finished == [] and hooked == []  # cancelled at once


async def test_write_behind_bodies_go_with_the_next_durable_append_in_order() -> None:
    store = SlowStore()
    store.release.set()
    log = RunLog("r", store)  # type: ignore[arg-type]
    first = OutputSet(node_id="a", key="k", value=1)
    assert await log.append([first], durable=False) == 1
    assert store.appended == []
    second = NodeStarted(node_id="b", visit=1)
    assert await log.append([second]) == 2
    assert store.appended == [(0, [first, second])]
    assert await log.flush() == 2  # nothing queued: no append
    assert len(store.appended) == 1


async def test_outputs_follow_output_sets_for_the_visit_in_the_live_state() -> None:
    log = RunLog("r", None)
    await log.append([NodeStarted(node_id="a", visit=1)])
    assert log.state.outputs["a"] == {}
    await log.append([OutputSet(node_id="a", key="k", value=1)])
    await log.append([OutputSet(node_id="a", key="j", value=2)])
    assert log.state.outputs["a"] == {"k": 1, "j": 2}
    # A rerun of the same visit (a resume after a crash or an input pause) goes on with them.
    await log.append([NodeStarted(node_id="a", visit=1, attempt=2)])
    assert log.state.outputs["a"] == {"k": 1, "j": 2}
    # A failed attempt that is retried starts afresh, as does a new visit.
    failed = NodeFailed(node_id="a", error="x", error_type="E", attempt=2, will_retry=True)
    await log.append([failed, NodeStarted(node_id="a", visit=1, attempt=3)])
    assert log.state.outputs["a"] == {}
    await log.append([OutputSet(node_id="a", key="k", value=3), NodeStarted(node_id="a", visit=2)])
    assert log.state.outputs["a"] == {}
    assert [e.seq for e in log.events()] == list(range(1, 9))
    assert fold(log.events()).outputs == log.state.outputs


class _Ignored(Submission):
    __slots__ = ()

    def on_done(self, result: AppendResult | None, error: BaseException | None) -> None:
        pass


class _Claim:
    """Run hooks whose claim is held while ``held()``; no threads are counted."""

    def __init__(self, held: Callable[[], bool]) -> None:
        self.holds = held

    def drain(self, node_id: str) -> Callable[[], None]:
        return lambda: None

    async def drained(self, node_id: str, timeout: float | None) -> bool:
        return True


async def test_a_log_whose_claim_is_not_held_hands_nothing_to_the_store(tmp_path: Any) -> None:
    held = True
    async with SqliteEventStore(tmp_path / "runs.db") as store:
        log = RunLog("r", store)
        log.run_hooks = _Claim(lambda: held)
        await log.append([NodeStarted(node_id="a", visit=1)])
        held = False
        submitted = log.submit([NodeStarted(node_id="b", visit=1)], _Ignored())
        with pytest.raises(LeaseLostError):
            await log.append(
                [NodeFailed(node_id="a", error="x", error_type="E", attempt=1, will_retry=False)]
            )
        stored = await store.read_all("r")
    assert not submitted
    assert [event.seq for event in stored] == [1]


class _FullQueue:
    """A store whose non-waiting submit finds its queue full (it takes nothing)."""

    def __init__(self, store: SqliteEventStore) -> None:
        self._store = store

    def submit(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_batch_the_store_does_not_take_leaves_the_staged_bodies_queued(
    tmp_path: Any,
) -> None:
    async with SqliteEventStore(tmp_path / "runs.db") as store:
        log = RunLog("r", cast(EventStore, _FullQueue(store)))
        log.stage(NodeStarted(node_id="a", visit=1))
        log.stage(OutputSet(node_id="a", key="k", value=1))
        assert not log.submit([NodeStarted(node_id="b", visit=1)], _Ignored())
        # The staged bodies wait for the next append, without the refused batch's own.
        assert list(log.pending) == [
            NodeStarted(node_id="a", visit=1),
            OutputSet(node_id="a", key="k", value=1),
        ]
        await log.append([NodeStarted(node_id="c", visit=1)])
        stored = await store.read_all("r")
    assert [(e.seq, getattr(e.body, "node_id", None)) for e in stored] == [
        (1, "a"),
        (2, "a"),
        (3, "c"),
    ]
    assert log.pending == [] and log.last_seq == 3


async def test_staging_two_bodies_in_one_call_is_staging_them_one_after_the_other() -> None:
    bodies = [
        NodeStarted(node_id="a", visit=1),
        OutputSet(node_id="a", key="k", value=1),
        NodeStarted(node_id="b", visit=1),
    ]
    one_by_one, in_pairs = RunLog("r", None), RunLog("r", None)
    for body in bodies:
        one_by_one.stage(body)
    in_pairs.stage(bodies[0])
    in_pairs.stage(bodies[1], bodies[2])  # onto a queue already begun
    fresh = RunLog("r", None)
    fresh.stage(bodies[0], bodies[1])  # onto the empty queue
    assert in_pairs.pending == one_by_one.pending == bodies
    assert in_pairs.state == one_by_one.state and in_pairs.state.last_seq == 3
    assert fresh.pending == bodies[:2] and fresh.state.last_seq == 2
    assert fresh.state.event_counts == {"node.started": 1, "output.set": 1}
