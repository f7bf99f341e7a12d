"""``Runtime.start`` returns once the run is in the store: any reader finds it at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import NodeStarted, RunStarted, RunStateError, Runtime
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_another_runtime_on_the_file_sees_the_run_as_soon_as_start_returns(
    tmp_path: Path, durability: str
) -> None:
    path = tmp_path / "runs.db"
    gate = anyio.Event()

    async def held(inputs: dict[str, Any]) -> dict[str, Any]:
        await gate.wait()
        return {"held": True}

    graph = linear_graph(["held", "last"], durability=durability)
    functions = {"held": held, "last": lambda inputs: {"last": True}}
    async with (
        Runtime(path, functions=functions, worker_id="owner") as owner,
        Runtime(path, worker_id="reader") as reader,
    ):
        handle = await owner.start(graph, input={"x": 1})
        state = await reader.get_state(handle.run_id)
        events = await reader.read_events(handle.run_id)
        gate.set()
        result = await handle.result()
    assert state.status == "running" and state.memory == {"x": 1}
    assert [type(e.body) for e in events[:2]] == [RunStarted, NodeStarted]
    assert result.status == "completed"


async def test_a_run_paused_at_its_entry_is_seen_paused_as_soon_as_start_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    graph = linear_graph(["gate"], pause_nodes=["gate"], durability="async")
    async with (
        Runtime(path, functions={"gate": lambda inputs: {}}) as owner,
        Runtime(path) as reader,
    ):
        handle = await owner.start(graph)
        state = await reader.get_state(handle.run_id)
    assert state.status == "paused" and state.pending == ["gate"]


async def test_starting_a_run_id_that_is_live_here_is_refused_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    gate = anyio.Event()

    async def held(inputs: dict[str, Any]) -> dict[str, Any]:
        await gate.wait()
        return {"held": True}

    graph = linear_graph(["held", "last"])
    functions = {"held": held, "last": lambda inputs: {"last": True}}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        handle = await rt.start(graph, run_id="r1")
        with pytest.raises(RunStateError, match="already running"):
            await rt.start(graph, run_id="r1")
        gate.set()
        result = await handle.result()
        events = await rt.read_events("r1")
    assert result.status == "completed" and result.memory["last"] is True
    assert sum(isinstance(e.body, RunStarted) for e in events) == 1
