"""A store that fails or refuses the batch one of the engine's fast paths submitted (a
node's step in its own task, a run's end from its last node's task, a new run's start in
the launching task): the user gets what the executor's ``receive`` gives for the same
failure. The result is an answer (a typed error or the result the store holds), never a
hang; nothing is reported that the store did not commit; the log still verifies; a run a
store error left running is resumed from its log. Real SQLite files and a real second
runtime; the store's failures are SQLite's own (fast_path_support.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import SqliteEventStore
from runtime import RunStateError, Runtime
from runtime.engine._start_now import run_started
from runtime.events._catalogue import NodeStarted
from runtime.spec._model import GraphSpec, NodeSpec

from .fast_path_support import (
    GRAPH,
    OWNERSHIP,
    RUN,
    Gated,
    Where,
    allow,
    outcome_of,
    refuse,
    resumed,
    route,
    stored,
    take_over,
)

pytestmark = pytest.mark.anyio

#: Where the failure is met: the node whose first attempt is held, and the nodes that
#: completed (in the log) before it.
_GATED = {"step": ("b", ["a"]), "end": ("c", ["a", "b"])}


async def _live_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: Where, path: str, failure: str
) -> dict[str, Any]:
    """Run GRAPH through ``path`` ("now": the fast path; "receive"), doing ``failure`` to
    the store while the gated node runs; what the user got and the store holds."""
    db, heads = tmp_path / f"{path}.db", tmp_path / f"{path}.heads"
    taken = route(monkeypatch, where, path)
    gated = Gated(_GATED[where][0])
    async with SqliteEventStore(db, heads_file=heads) as store:
        async with Runtime(store, functions=gated.functions(), ownership=OWNERSHIP) as rt:
            handle = await rt.start(GRAPH, run_id=RUN)
            with anyio.fail_after(10):  # a guard, not a wait
                await gated.entered.wait()
            if failure == "refused":
                await refuse(db)
            elif failure == "closed":
                await store.close()
            elif failure == "taken over":
                await take_over(db, RUN)
            elif failure == "expired":  # its lease ran out on this process's clock
                ownership = rt._running.ownership
                assert ownership is not None
                ownership.confirmed[RUN] = time.monotonic() - OWNERSHIP.lease_seconds - 1
            else:  # another runtime on the file appends a control event
                async with Runtime(db) as other:
                    if failure == "input":
                        await other.inject_input(RUN, {"y": 1})
                    elif failure == "pause":
                        await other.pause(RUN)
                    else:
                        await other.cancel(RUN, reason="elsewhere")
            gated.go.set()
            outcome = await outcome_of(handle, db)
            if failure == "refused":
                await allow(db)
    seen = {"outcome": outcome, "ran": gated.ran, **await stored(db, heads)}
    node = _GATED[where][0]
    if path == "now":  # the batch that met the failure was the fast path's
        assert (node, True) in taken
    else:
        assert taken == []
    return seen


def _completed(seen: dict[str, Any]) -> list[int]:
    return [seq for seq, kind in seen["events"] if kind == "NodeCompleted"]


@pytest.mark.parametrize("where", ["step", "end"])
@pytest.mark.parametrize(
    ("failure", "error"),
    [
        ("refused", ("StoreError", "<db>: append failed: refused by the test")),
        ("closed", ("StoreClosedError", "append: the event store is closed")),
    ],
)
async def test_a_store_error_on_a_fast_path_batch_fails_the_result_as_receive_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: Where,
    failure: str,
    error: tuple[str, str],
) -> None:
    now = await _live_run(tmp_path, monkeypatch, where, "now", failure)
    receive = await _live_run(tmp_path, monkeypatch, where, "receive", failure)
    assert now == receive
    assert now["outcome"] == ("raised", error)
    # Nothing of the failed batch is in the log: the gated node did not complete, the
    # run did not finish, and the node after it never ran.
    node, before = _GATED[where]
    assert now["ran"] == [*before, node]
    assert len(_completed(now)) == len(before)
    assert now["status"] == "running" and now["result"] is None
    assert now["verified"] == (True, None)
    if failure == "refused":
        # The run a store error left running is a crashed run: a resume runs the node
        # whose completion was never committed, and completes it.
        gated = Gated(None)
        status, (final, memory, _error) = await resumed(tmp_path / "now.db", gated)
        assert (status, final, memory) == ("result", "completed", {"a": 1, "b": 1, "c": 1})
        assert gated.ran == ["a", "b", "c"][len(before) :]


@pytest.mark.parametrize("where", ["step", "end"])
@pytest.mark.parametrize("failure", ["input", "pause", "cancel"])
async def test_another_writers_append_meets_a_fast_path_batch_as_it_meets_receive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: Where, failure: str
) -> None:
    now = await _live_run(tmp_path, monkeypatch, where, "now", failure)
    receive = await _live_run(tmp_path, monkeypatch, where, "receive", failure)
    assert now == receive
    kind, (status, memory, error) = now["outcome"]
    assert kind == "result"
    # What the user gets is what the store holds, and the log verifies.
    result = now["result"]
    assert result is not None
    assert (status, memory, error) == (result.status, result.memory, result.error)
    assert now["status"] == status
    assert now["verified"] == (True, None)
    node, before = _GATED[where]
    completed = len(_completed(now))
    if failure == "input":  # taken in from the log: the node runs again, once recorded
        assert status == "completed" and memory == {"a": 1, "b": 1, "c": 1, "y": 1}
        assert now["ran"] == [*before, node, node, "c"][:4]
        assert completed == 3
    elif failure == "pause":
        if where == "step":  # the start of the node after it is held: paused before c
            assert status == "paused" and result.resume_at == ["c"]
            assert now["ran"] == ["a", "b"] and completed == 2
        else:  # no node boundary left to pause at: the run's end is recorded after it
            assert status == "completed" and completed == 3
            kinds = [k for _seq, k in now["events"]]
            assert kinds[-4:] == ["PauseRequested", "MemoryWritten", "NodeCompleted", "RunFinished"]
    else:  # the cancel stands: the gated node's completion is not recorded
        assert status == "cancelled" and error == "elsewhere"
        assert completed == len(before)
        assert now["ran"] == [*before, node]


_TAKEN_OVER = (
    "LeaseLostError",
    f"run {RUN!r}: this process's claim (epoch 1) is lost; the store is at epoch 2, "
    "owner 'thief'; nothing was written",
)
_EXPIRED = (
    "LeaseLostError",
    f"run {RUN!r}: this process's claim is lost; its lease could not be renewed, so the "
    "run stopped here",
)


@pytest.mark.parametrize(
    ("where", "failure"),
    [
        ("step", "taken over"),
        ("end", "taken over"),
        ("step", "expired"),  # the log hands the batch to no store
        ("end", "expired"),
    ],
)
async def test_a_claim_lost_at_a_fast_path_batch_fails_the_result_as_receive_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: Where,
    failure: str,
) -> None:
    receive = await _live_run(tmp_path, monkeypatch, where, "receive", failure)
    now = await _live_run(tmp_path, monkeypatch, where, "now", failure)
    assert now == receive
    assert now["outcome"] == ("raised", _TAKEN_OVER if failure == "taken over" else _EXPIRED)
    node, before = _GATED[where]
    assert now["ran"] == [*before, node]
    assert len(_completed(now)) == len(before)
    assert now["status"] == "running" and now["result"] is None  # for the new owner to go on
    assert now["verified"] == (True, None)


async def _start_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, before: str | None
) -> dict[str, Any]:
    """Start GRAPH as RUN through ``path`` with every event row refused (``before`` None),
    or with RUN already in the store: another runtime's finished run, or a run a direct
    append left running (a crashed one nobody holds)."""
    db = tmp_path / f"{path}.db"
    other = GraphSpec(
        id="other", nodes=[NodeSpec(id="a", kind="function", function="a")], entry_node="a"
    )
    if before == "finished":
        async with Runtime(db, functions=Gated(None).functions()) as rt:
            assert (await (await rt.start(other, run_id=RUN)).result()).status == "completed"
    elif before == "crashed":
        async with SqliteEventStore(db) as store:
            bodies = [run_started(other, {}), NodeStarted(node_id="a", visit=1, attempt=1)]
            await store.append(RUN, bodies, expected_seq=0)
    taken = route(monkeypatch, "start", path)
    gated = Gated(None)
    async with SqliteEventStore(db) as store:
        async with Runtime(store, functions=gated.functions(), ownership=OWNERSHIP) as rt:
            if before is None:
                await refuse(db)
            try:
                outcome = await outcome_of(await rt.start(GRAPH, run_id=RUN), db)
            finally:
                if before is None:
                    await allow(db)
    assert taken == ([True] if path == "now" else [])
    return {"outcome": outcome, "ran": gated.ran, **await stored(db)}


async def test_a_store_error_on_the_start_batch_fails_the_result_as_receive_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = await _start_run(tmp_path, monkeypatch, "now", None)
    receive = await _start_run(tmp_path, monkeypatch, "receive", None)
    assert now == receive
    assert now["outcome"] == ("raised", ("StoreError", "<db>: append failed: refused by the test"))
    # Nothing of the run was written (no run left running), and no node ran.
    assert (now["status"], now["events"], now["ran"]) == (None, [], [])
    # Its id is still free: a start of it completes.
    async with Runtime(tmp_path / "now.db", functions=Gated(None).functions()) as rt:
        result = await (await rt.start(GRAPH, run_id=RUN)).result()
    assert (result.status, result.path) == ("completed", ["a", "b", "c"])


@pytest.mark.parametrize("before", ["finished", "crashed"])
async def test_a_start_whose_id_another_writer_used_answers_as_receive_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    now = await _start_run(tmp_path, monkeypatch, "now", before)
    receive = await _start_run(tmp_path, monkeypatch, "receive", before)
    assert now == receive
    assert now["verified"] == (True, None)


@pytest.mark.parametrize("before", ["finished", "crashed"])
async def test_a_start_whose_id_another_writer_used_fails_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    seen = await _start_run(tmp_path, monkeypatch, "now", before)
    kind, answer = seen["outcome"]
    assert kind == "raised", answer  # not the other run's result, nor a result of its graph
    status = "completed" if before == "finished" else "running"
    assert answer == (
        RunStateError.__name__,
        f"run {RUN} is {status}: a run with this id is already in the store (resume or fork "
        "it instead)",
    )
    assert seen["ran"] == []
    assert seen["status"] == status  # the stored run is left as it was
