"""The run's common end recorded in its last node's task (runtime/engine/_end_now.py): the
log it records is what the executor's ``receive`` records, and the result is reported only
once that end is committed."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

import runtime.engine._step_now as step_now
from eventstore import SnapshotTaken, SqliteEventStore
from runtime._runtime import Runtime
from runtime.events._catalogue import RunFinished
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = pytest.mark.anyio

_NAMES = [f"n{i}" for i in range(30)]  # enough events for a snapshot at rest


def _chain(terminal: bool) -> GraphSpec:
    return GraphSpec(
        id="chain",
        nodes=[NodeSpec(id=n, kind="function", function="step") for n in _NAMES],
        edges=[EdgeSpec(source=a, target=b) for a, b in itertools.pairwise(_NAMES)],
        entry_node=_NAMES[0],
        terminal_nodes=[_NAMES[-1]] if terminal else [],
    )


async def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs.get("x", 0) + 1}


_SUBMIT = SqliteEventStore.submit


def _full(store: Any, run_id: str, events: Any, **kw: Any) -> bool:
    """A store whose queue is full for the run's end: it is appended, waiting."""
    if any(type(e) is RunFinished for e in events):
        return False
    return _SUBMIT(store, run_id, events, **kw)


@pytest.mark.parametrize("terminal", [False, True])
async def test_an_end_recorded_now_is_the_end_receive_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    taken: list[bool] = []
    real = step_now.end_now

    def spied(*args: Any, **kwargs: Any) -> bool:
        taken.append(real(*args, **kwargs))
        return taken[-1]

    logs = {}
    for how in ("now", "receive", "full queue"):
        if how == "now":
            monkeypatch.setattr(step_now, "end_now", spied)
        elif how == "receive":  # declined: the executor's receive records the end
            monkeypatch.setattr(step_now, "end_now", lambda *a, **k: False)
        else:  # taken now, but the store's queue is full: receive appends what it staged
            monkeypatch.setattr(step_now, "end_now", spied)
            monkeypatch.setattr(SqliteEventStore, "submit", _full)
        async with Runtime(tmp_path / f"{how}.db", functions={"step": _step}) as rt:
            handle = await rt.start(_chain(terminal), input={"x": 0}, run_id="r1")
            result = await handle.result()
            events = await rt.read_events(result.run_id)
        assert result.status == "completed"
        assert result.memory == {"x": len(_NAMES)}
        logs[how] = [(e.seq, msgspec.json.encode(e.body)) for e in events]
    assert taken == [True, True]  # the end was taken now (the last node's step)
    assert logs["now"] == logs["receive"] == logs["full queue"]
    assert len(logs["now"]) > 100
    kinds = [type(e.body) for e in events]
    assert kinds[-2:] == [RunFinished, SnapshotTaken]  # the end's batch carries the snapshot


async def test_the_result_is_reported_once_the_end_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[tuple[Any, Any]] = []
    arrived = anyio.Event()
    submit = SqliteEventStore.submit

    def holding(store: Any, run_id: str, events: Any, *, on_done: Any, **kw: Any) -> bool:
        if not any(type(e) is RunFinished for e in events):
            return submit(store, run_id, events, on_done=on_done, **kw)

        def answer(result: Any, error: Any) -> None:  # the store's answer, held back
            held.append((on_done, (result, error)))
            arrived.set()

        return submit(store, run_id, events, on_done=answer, **kw)

    monkeypatch.setattr(SqliteEventStore, "submit", holding)
    reported: list[Any] = []
    async with Runtime(tmp_path / "runs.db", functions={"step": _step}) as rt:
        handle = await rt.start(_chain(True), input={"x": 0})

        async def wait() -> None:
            reported.append(await handle.result())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait)
            await arrived.wait()  # committed; its answer not handed on yet
            await anyio.wait_all_tasks_blocked()
            assert reported == []
            assert not handle._outcome.done  # not settled either (nor the run stopped)
            on_done, (result, error) = held[0]
            assert error is None
            on_done(result, error)
        assert len(held) == 1
        assert reported[0].status == "completed"
        assert reported[0].memory == {"x": len(_NAMES)}
