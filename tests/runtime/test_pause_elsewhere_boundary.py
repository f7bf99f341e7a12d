"""A pause from another process stops the run at the first node boundary after its
request is committed, as an in-process pause does (issue 26), whatever append of the
owner meets the request: the step that would start the next node (that start is held,
never recorded), or appends of several lanes in flight at once (the log is rebased after
the request, nothing is interrupted). The owner's watch of the store's heads is slowed
to an hour, so only its appends can meet the request. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from runtime import EdgeSpec, GraphSpec, NodeContext, OwnershipConfig, Runtime
from runtime.events import NodeCompleted, NodeStarted, PauseRequested, RunPaused, fold
from runtime.server import create_app
from runtime.testing import function_node
from tests.runtime.server.support import live_server

pytestmark = pytest.mark.anyio

SLOW_WATCH = OwnershipConfig(control_interval=3600)
CHAIN = [f"n{i}" for i in range(1, 6)]
MAGISTRATE = Path(sys.executable).with_name("magistrate")
TOKEN = "t" * 20


def _chain() -> GraphSpec:
    return GraphSpec(
        id="chain",
        nodes=[function_node(n, output_keys=[n]) for n in CHAIN],
        edges=[EdgeSpec(source=a, target=b) for a, b in pairwise(CHAIN)],
        entry_node="n1",
    )


def _started(events: list[Any]) -> list[str]:
    return [e.body.node_id for e in events if isinstance(e.body, NodeStarted)]


@pytest.mark.parametrize("k", [1, 3, 4])
async def test_a_pause_from_another_runtime_stops_right_after_the_node_running(
    store: str, k: int
) -> None:
    running, go = anyio.Event(), anyio.Event()
    calls: list[str] = []

    def node(name: str) -> Any:
        async def run(inputs: dict[str, Any]) -> dict[str, Any]:
            calls.append(name)
            if name == f"n{k}":
                running.set()
                await go.wait()  # the request is committed meanwhile; this node ignores it
            return {name: True}

        return run

    functions = {n: node(n) for n in CHAIN}
    async with (
        Runtime(store, functions=functions, ownership=SLOW_WATCH) as owner,
        Runtime(store) as other,
    ):
        handle = await owner.start(_chain())
        await running.wait()
        await other.pause(handle.run_id)
        go.set()
        result = await handle.result()
        events = await owner.read_events(handle.run_id)
        assert (result.status, result.paused_reason) == ("paused", "user")
        assert result.resume_at == [f"n{k + 1}"]
        # Node k finished with its outputs kept; node k+1 never started.
        assert result.memory == {f"n{i}": True for i in range(1, k + 1)}
        assert _started(events) == CHAIN[:k] and calls == CHAIN[:k]
        request = next(e.seq for e in events if isinstance(e.body, PauseRequested))
        done_k = next(
            e.seq for e in events if isinstance(e.body, NodeCompleted) and e.body.node_id == f"n{k}"
        )
        assert request < done_k
        assert [e.body for e in events if isinstance(e.body, RunPaused)] == [
            RunPaused(reason="user", node_id=f"n{k + 1}")
        ]
        assert fold(events).status == "paused"
        resumed = await (await owner.resume(handle.run_id)).result()
    assert resumed.status == "completed" and calls == CHAIN


def _lanes() -> GraphSpec:
    """start forks into a1 -> a2 and b1 -> b2, which meet at end."""
    return GraphSpec(
        id="lanes",
        nodes=[
            function_node("start"),
            function_node("a1", output_keys=["a1"]),
            function_node("a2", output_keys=["a2"]),
            function_node("b1", output_keys=["b1"]),
            function_node("b2", output_keys=["b2"]),
            function_node("end"),
        ],
        edges=[
            EdgeSpec(source="start", target="a1"),
            EdgeSpec(source="start", target="b1"),
            EdgeSpec(source="a1", target="a2"),
            EdgeSpec(source="b1", target="b2"),
            EdgeSpec(source="a2", target="end"),
            EdgeSpec(source="b2", target="end"),
        ],
        entry_node="start",
    )


RUNS = 5


async def test_a_pause_meeting_appends_of_several_lanes_stops_each_at_its_boundary(
    store: str,
) -> None:
    """a1 and b1 append progress concurrently until the pause is in their run's state
    (their appends meet the request, several in flight): each finishes, nothing is
    interrupted or run twice, a2 and b2 never start; resumed, the run completes."""
    calls: list[str] = []
    appending = anyio.Event()

    def lane(name: str) -> Any:
        async def run(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
            calls.append(name)
            step = 0
            with anyio.fail_after(60):
                while not ctx.pause_requested:
                    step += 1
                    await ctx.set_output(name, step)
                    appending.set()
                    await anyio.sleep(0.002)
            return {name: step}

        return run

    functions: dict[str, Any] = {n: lane(n) for n in ("a1", "b1")}
    functions |= {"a2": lambda inputs: {"a2": 0}, "b2": lambda inputs: {"b2": 0}}
    functions |= {"start": lambda inputs: {}, "end": lambda inputs: {}}
    async with (
        Runtime(store, functions=functions, ownership=SLOW_WATCH) as owner,
        Runtime(store) as other,
    ):
        for _ in range(RUNS):
            calls.clear()
            appending = anyio.Event()
            handle = await owner.start(_lanes())
            await appending.wait()
            await other.pause(handle.run_id)
            result = await handle.result()
            events = await owner.read_events(handle.run_id)
            assert (result.status, result.paused_reason) == ("paused", "user"), result
            assert sorted(result.resume_at) == ["a2", "b2"]
            assert sorted(_started(events)) == ["a1", "b1", "start"]
            assert sorted(calls) == ["a1", "b1"]  # never interrupted, never run twice
            completed = {e.body.node_id for e in events if isinstance(e.body, NodeCompleted)}
            assert completed == {"start", "a1", "b1"}
            assert sum(isinstance(e.body, PauseRequested) for e in events) == 1
            assert sum(isinstance(e.body, RunPaused) for e in events) == 1
            assert (await owner.get_state(handle.run_id)).status == "paused"
            resumed = await (await owner.resume(handle.run_id)).result()
            assert resumed.status == "completed"
            assert sorted(calls) == ["a1", "b1"]  # a2 and b2 are plain lambdas
        assert owner.store is not None
        info = await owner.store.get_run(handle.run_id)
        assert info is not None and info.owner is None


async def _pause_by_cli(store: str, run_id: str) -> None:
    done = await anyio.run_process(
        [str(MAGISTRATE), "pause", run_id, "--store", store, "--output", "json"], check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pause_requested"] is True


async def _pause_by_http(store: str, run_id: str) -> None:
    async with Runtime(store) as server_rt:
        app = create_app(server_rt, token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            answer = await client.post(
                f"/api/runs/{run_id}/pause", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert answer.status_code == 202, answer.text


@pytest.mark.parametrize("front", ["cli", "http"])
async def test_a_pause_from_the_cli_or_the_http_api_stops_right_after_the_node_running(
    store: str, front: str
) -> None:
    """The same from the fronts: ``magistrate pause`` in a subprocess, ``POST .../pause``
    over loopback to a server of its own; node 2 of 5 runs meanwhile."""
    running, go = anyio.Event(), anyio.Event()
    calls: list[str] = []

    def node(name: str) -> Any:
        async def run(inputs: dict[str, Any]) -> dict[str, Any]:
            calls.append(name)
            if name == "n2":
                running.set()
                await go.wait()
            return {name: True}

        return run

    async with Runtime(store, functions={n: node(n) for n in CHAIN}, ownership=SLOW_WATCH) as rt:
        handle = await rt.start(_chain())
        await running.wait()
        await (_pause_by_cli if front == "cli" else _pause_by_http)(store, handle.run_id)
        go.set()
        result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert (result.status, result.paused_reason, result.resume_at) == ("paused", "user", ["n3"])
    assert result.memory == {"n1": True, "n2": True}
    assert _started(events) == ["n1", "n2"] and calls == ["n1", "n2"]
