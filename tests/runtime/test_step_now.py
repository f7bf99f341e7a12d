"""The common step taken in a node's task (runtime/engine/_step_now.py): what it records and
what a node sees are what the executor's own handling gives."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from pathlib import Path
from typing import Any

import pytest

from eventstore import SqliteEventStore
from runtime._runtime import Runtime
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = pytest.mark.anyio

_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


def _chain(names: str) -> GraphSpec:
    return GraphSpec(
        id="chain",
        nodes=[NodeSpec(id=n, kind="function", function=n) for n in names],
        edges=[EdgeSpec(source=a, target=b) for a, b in itertools.pairwise(names)],
        entry_node=names[0],
        terminal_nodes=[names[-1]],
    )


def _leaky(name: str, seen: list[str]) -> Any:
    async def run(inputs: dict[str, Any]) -> dict[str, Any]:
        seen.append(_SEEN.get())
        _SEEN.set(name)  # never reset: the next node must not see it
        return {name: 1}

    return run


@pytest.mark.parametrize("durable", [False, True])
async def test_no_node_sees_a_context_variable_another_node_set(
    tmp_path: Path, durable: bool
) -> None:
    seen: list[str] = []
    functions = {n: _leaky(n, seen) for n in "abcd"}
    async with Runtime(tmp_path / "runs.db" if durable else None, functions=functions) as rt:
        result = await (await rt.start(_chain("abcd"))).result()
    assert result.status == "completed"
    assert result.path == ["a", "b", "c", "d"]
    assert seen == ["", "", "", ""]


@pytest.mark.parametrize("durable", [False, True])
async def test_runs_started_where_no_context_variable_is_set_share_nothing_a_node_set(
    tmp_path: Path, durable: bool
) -> None:
    # Lanes made where no variable is set share one empty context (only ever copied): a
    # variable a node sets reaches no later node, nor the next run's.
    seen: list[str] = []
    functions = {n: _leaky(n, seen) for n in "abcd"}
    async with Runtime(tmp_path / "runs.db" if durable else None, functions=functions) as rt:

        async def two_runs() -> list[str]:
            statuses = []
            for _ in range(2):
                statuses.append((await (await rt.start(_chain("abcd"))).result()).status)
            return statuses

        task = asyncio.get_running_loop().create_task(two_runs(), context=contextvars.Context())
        statuses = await task
    assert statuses == ["completed", "completed"]
    assert seen == [""] * 8


async def test_steps_whose_commit_cannot_be_handed_over_at_once_record_the_same_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def step(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"x": inputs.get("x", 0) + 1}

    functions = {n: step for n in "abcd"}
    logs = []
    for full in (False, True):
        if full:  # a store whose queue is always full: every step appends, waiting
            monkeypatch.setattr(SqliteEventStore, "submit", lambda *a, **k: False)
        async with Runtime(tmp_path / f"runs-{full}.db", functions=functions) as rt:
            result = await (await rt.start(_chain("abcd"), input={"x": 0})).result()
            events = await rt.read_events(result.run_id)
        assert result.status == "completed"
        assert result.memory == {"x": 4}
        logs.append([(e.seq, type(e.body).__name__) for e in events])
    assert logs[0] == logs[1]
    assert len(logs[0]) == 1 + 4 * 4 - 1 + 1  # run.started, 4 starts, writes, completions
