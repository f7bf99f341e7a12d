"""``Runtime.start`` returns once the run is in the store: any reader finds it at once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import GraphSpec, OwnershipConfig, RunStateError, Runtime, SpecErrors
from runtime.events import NodeStarted, RunStarted
from runtime.testing import function_node, linear_graph

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
        Runtime(path, functions=functions, ownership=OwnershipConfig(worker_id="owner")) as owner,
        Runtime(path, ownership=OwnershipConfig(worker_id="reader")) as reader,
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


async def test_starting_a_run_id_a_finished_in_memory_run_has_is_refused_and_keeps_its_log() -> (
    None
):
    graph = linear_graph(["first"])
    async with Runtime(None, functions={"first": lambda inputs: {"n": 1}}) as rt:
        assert (await (await rt.start(graph, run_id="r1")).result()).status == "completed"
        before = await rt.read_events("r1")
        with pytest.raises(RunStateError, match="r1 is completed: a run with this id is already"):
            await rt.start(graph, run_id="r1")
        after = await rt.read_events("r1")
        state = await rt.get_state("r1")
    assert [e.seq for e in after] == [e.seq for e in before] and state.status == "completed"


@pytest.mark.parametrize(
    ("graph", "path", "reason"),
    [
        (
            linear_graph([function_node("f", retry={"max_attempts": 1})]),
            "nodes[0].retry",
            "expected RetryPolicy, got dict",
        ),
        (
            GraphSpec(id="g", nodes=[function_node("f")], entry_node="f", retry={"jitter": 0}),
            "retry",
            "expected RetryPolicy, got dict",
        ),
        (
            linear_graph([function_node("f", timeout="5")]),
            "nodes[0].timeout",
            "Expected `float | null`, got `str`",
        ),
        (linear_graph([function_node("f", output_keys="ab")]), "nodes[0].output_keys", "got `str`"),
    ],
)
async def test_a_python_built_graph_of_wrong_types_is_refused_before_anything_is_written(
    tmp_path: Path, graph: GraphSpec, path: str, reason: str
) -> None:
    # msgspec checks types when it decodes, not when NodeSpec(...) is built: a dict for
    # a RetryPolicy used to start the run, which then failed with an AttributeError.
    async with Runtime(tmp_path / "runs.db", functions={"f": lambda inputs: {}}) as rt:
        with pytest.raises(SpecErrors) as refused:
            await rt.start(graph)
        assert rt.store is not None
        assert (await rt.store.query_runs()).runs == []
    assert refused.value.path == path and reason in refused.value.reason


@pytest.mark.parametrize("store", [True, False])
async def test_a_new_run_id_is_the_hex_of_a_random_version_4_uuid(
    tmp_path: Path, store: bool
) -> None:
    graph = linear_graph(["a"])
    ids = set()
    async with Runtime(
        tmp_path / "runs.db" if store else None, functions={"a": lambda i: {}}
    ) as rt:
        for _ in range(20):
            handle = await rt.start(graph)
            await handle.result()
            ids.add(handle.run_id)
    assert len(ids) == 20
    for run_id in ids:
        parsed = uuid.UUID(run_id)
        assert parsed.hex == run_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122
