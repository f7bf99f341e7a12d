"""Runs that meet a store failure or another writer at the batch one of the engine's fast
paths submits (runtime/engine/_start_now.py, _step_now.py, _end_now.py), on real SQLite
files, once through the fast path and once through the executor's ``receive`` (the fast
path declined), so a test compares what a user gets from each.

The gated node's first attempt waits until the test has done what it does to the store
(a trigger that refuses every event row, the store closed, another runtime's append, the
claim taken over in the file) and is then let go: its ``NodeDone`` is the message the fast
path takes, and the batch it submits is the first to meet the failure.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

import runtime.engine._executor as executor_module
import runtime.engine._step_now as step_now_module
from eventstore import SqliteEventStore
from runtime import OwnershipConfig, Runtime
from runtime._result import result_from_state
from runtime.engine._step_now import StepNow
from runtime.events._state import fold
from runtime.reads import RunReader
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

__all__ = [
    "GRAPH",
    "OWNERSHIP",
    "RUN",
    "Gated",
    "Where",
    "allow",
    "outcome_of",
    "refuse",
    "resumed",
    "route",
    "stored",
    "take_over",
]

Where = Literal["start", "step", "end"]

RUN = "r1"

#: a -> b -> c, c terminal: b's step and c's end are each one fast-path batch.
GRAPH = GraphSpec(
    id="abc",
    nodes=[NodeSpec(id=n, kind="function", function=n) for n in "abc"],
    edges=[EdgeSpec(source="a", target="b"), EdgeSpec(source="b", target="c")],
    entry_node="a",
    terminal_nodes=["c"],
)

#: Neither the owner's watch of the store's heads nor its lease renewals look during a
#: test: another writer's append (or the takeover of the claim) is met by the fast path's
#: batch itself, not found first by a watch.
OWNERSHIP = OwnershipConfig(control_interval=3600, lease_seconds=3600)

_START_NOW = executor_module.start_now
_TAKE = StepNow.take
_END_NOW = step_now_module.end_now


def route(monkeypatch: pytest.MonkeyPatch, where: Where, path: str) -> list[Any]:
    """Take ``where``'s fast path ("now", spied: what it answered, by node for a step or
    an end) or decline it ("receive": the executor's ``receive`` records it)."""
    taken: list[Any] = []
    declined = path == "receive"
    if where == "start":

        def start_now(*args: Any) -> bool:
            taken.append(_START_NOW(*args))
            return bool(taken[-1])

        monkeypatch.setattr(
            executor_module, "start_now", (lambda *a: False) if declined else start_now
        )
    elif where == "step":

        def take(steps: StepNow, executor: Any, done: Any) -> bool:
            answer = _TAKE(steps, executor, done)
            taken.append((done.node_id, answer))
            return answer

        monkeypatch.setattr(StepNow, "take", (lambda *a: False) if declined else take)
    else:

        def end_now(executor: Any, done: Any, *args: Any, **kwargs: Any) -> bool:
            answer = _END_NOW(executor, done, *args, **kwargs)
            taken.append((done.node_id, answer))
            return answer

        monkeypatch.setattr(
            step_now_module, "end_now", (lambda *a, **k: False) if declined else end_now
        )
    return taken


class Gated:
    """The graph's functions: each records that it ran and writes its name; ``gated``'s
    first attempt waits, once ``entered`` is set, until ``go`` is set."""

    __slots__ = ("entered", "gated", "go", "ran")

    def __init__(self, gated: str | None) -> None:
        self.gated = gated
        self.entered = anyio.Event()
        self.go = anyio.Event()
        self.ran: list[str] = []

    def functions(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        def node(name: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
            async def run(inputs: dict[str, Any]) -> dict[str, Any]:
                self.ran.append(name)
                if name == self.gated and not self.go.is_set():
                    self.entered.set()
                    await self.go.wait()
                return {name: 1}

            return run

        return {name: node(name) for name in "abc"}


def _sql(path: Path, statement: str, *params: Any) -> None:
    with sqlite3.connect(path, timeout=10) as conn:
        conn.execute(statement, params)
    conn.close()


async def refuse(path: Path) -> None:
    """Make SQLite refuse every event row from now on (another connection's trigger): the
    store's writer fails the transaction and answers its appends with a StoreError."""
    await anyio.to_thread.run_sync(
        _sql,
        path,
        "CREATE TRIGGER refuse BEFORE INSERT ON events "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )


async def allow(path: Path) -> None:
    """Undo :func:`refuse`."""
    await anyio.to_thread.run_sync(_sql, path, "DROP TRIGGER refuse")


async def take_over(path: Path, run_id: str) -> None:
    """What another process's claim of the run after an expired lease leaves in the file:
    a new owner and epoch, so this store's next append of the run meets the epoch fence."""
    await anyio.to_thread.run_sync(
        _sql,
        path,
        "UPDATE claims SET owner = 'thief', epoch = epoch + 1, expires = 9e12 WHERE run_id = ?",
        run_id,
    )


async def outcome_of(handle: Any, db: Path) -> tuple[str, Any]:
    """What ``handle.result()`` gives: ("result", (status, memory, error)) or ("raised",
    (error type, message with the file's path taken out)). A hang fails the test."""
    try:
        with anyio.fail_after(10):  # a guard against a result that never comes, not a wait
            result = await handle.result()
    except TimeoutError:
        raise  # hung: not an answer
    except Exception as exc:
        return "raised", (type(exc).__name__, str(exc).replace(str(db), "<db>"))
    return "result", (result.status, result.memory, result.error)


async def stored(db: Path, heads: Path | None = None) -> dict[str, Any]:
    """The run as a fresh store on the file finds it: its status, its events (seq, type),
    the result its log gives (None while it runs) and the verification the CLI's ``verify``
    makes (hash chain, snapshot, the heads file's newest head)."""
    async with SqliteEventStore(db, heads_file=heads) as store:
        info = await store.get_run(RUN)
        events = await store.read_all(RUN)
        report = await RunReader(store).verify(RUN)
    found: dict[str, Any] = {
        "status": None if info is None else info.status,
        "events": [(e.seq, type(e.body).__name__) for e in events],
        "verified": (report.ok, report.reason),
    }
    state = fold(events) if events else None
    found["result"] = (
        None if state is None or state.status == "running" else result_from_state(state)
    )
    return found


async def resumed(db: Path, gated: Gated) -> tuple[str, Any]:
    """Resume the run in a new runtime on the file; what its result gives."""
    async with Runtime(db, functions=gated.functions()) as rt:
        handle = await rt.resume(RUN)
        return await outcome_of(handle, db)
