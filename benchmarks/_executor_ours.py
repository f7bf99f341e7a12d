"""Our side of ``python -m benchmarks executor``: the graphs and the timed workloads.

Each workload runs on a fresh SQLite file in a temporary directory (WAL,
synchronous=FULL, ``durability="sync"``) or on no store, with one untimed warm-up run
first, and answers the same figures as the peer scripts (``_langgraph_peer.py``,
``_dbos_executor_peer.py``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from benchmarks._peer_protocol import payload
from runtime._runtime import Runtime
from runtime.spec._model import EdgeSpec, GraphSpec, MemoryKey, NodeSpec

__all__ = [
    "PAYLOAD_BYTES",
    "SLEEP_MS",
    "ours_concurrent",
    "ours_linear",
    "ours_loop",
    "ours_memory_list",
    "run_ours",
]

#: Each node of the concurrent workload sleeps this long (the ideal run is nodes x this).
SLEEP_MS = 10.0
#: Bytes appended to the memory list per step in the memory-list workload.
PAYLOAD_BYTES = 2048


# ---------------------------------------------------------------------------- graphs


async def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs["x"] + 1}


async def sleeping_step(inputs: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(SLEEP_MS / 1000)
    return {"x": inputs["x"] + 1}


async def loop_step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"i": inputs["i"] + 1}


async def list_step(inputs: dict[str, Any]) -> dict[str, Any]:
    i = inputs["i"] + 1
    return {"i": i, "messages": payload(i, PAYLOAD_BYTES)}


FUNCTIONS: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "step": step,
    "sleeping_step": sleeping_step,
    "loop_step": loop_step,
    "list_step": list_step,
}


def linear_graph(nodes: int, function: str) -> GraphSpec:
    return GraphSpec(
        id=f"linear-{nodes}",
        nodes=[NodeSpec(id=f"n{i}", function=function) for i in range(nodes)],
        edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(nodes - 1)],
        entry_node="n0",
        max_steps=nodes + 10,
        durability="sync",
    )


def loop_graph(steps: int, function: str, memory: list[MemoryKey] | None = None) -> GraphSpec:
    return GraphSpec(
        id=f"loop-{steps}",
        nodes=[NodeSpec(id="loop", function=function)],
        edges=[
            EdgeSpec(
                source="loop", target="loop", condition="conditional", expression=f"i < {steps}"
            ),
        ],
        entry_node="loop",
        max_steps=steps + 10,
        memory=memory or [],
        durability="sync",
    )


# ---------------------------------------------------------------------------- our side


@contextmanager
def _temp_db(store: bool) -> Iterator[str | None]:
    directory = tempfile.mkdtemp(prefix="magistrate-bench-")
    try:
        yield os.path.join(directory, "events.db") if store else None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _check(result: Any, key: str, expected: int) -> None:
    if result.status != "completed" or result.memory.get(key) != expected:
        raise AssertionError(
            f"run ended {result.status} with {key}={result.memory.get(key)!r} "
            f"(expected {expected}); error: {getattr(result, 'error', None)}"
        )


async def _sequential(
    graph: GraphSpec, store: bool, runs: int, state: dict[str, Any], key: str, expected: int
) -> float:
    with _temp_db(store) as path:
        async with Runtime(path, functions=FUNCTIONS) as rt:
            _check(await (await rt.start(graph, input=state)).result(), key, expected)
            start = time.perf_counter()
            for _ in range(runs):
                handle = await rt.start(graph, input=state)
                _check(await handle.result(), key, expected)
            return time.perf_counter() - start


async def ours_linear(nodes: int, runs: int, store: bool) -> dict[str, Any]:
    graph = linear_graph(nodes, "step")
    elapsed = await _sequential(graph, store, runs, {"x": 0}, "x", nodes)
    return {"elapsed_s": elapsed, "steps": runs * nodes}


async def ours_loop(steps: int, runs: int) -> dict[str, Any]:
    graph = loop_graph(steps, "loop_step")
    elapsed = await _sequential(graph, True, runs, {"i": 0}, "i", steps)
    return {"elapsed_s": elapsed, "steps": runs * steps}


async def ours_concurrent(nodes: int, runs: int) -> dict[str, Any]:
    graph = linear_graph(nodes, "sleeping_step")
    with _temp_db(True) as path:
        async with Runtime(path, functions=FUNCTIONS) as rt:
            _check(await (await rt.start(graph, input={"x": 0})).result(), "x", nodes)
            results: list[Any] = []

            async def one() -> None:
                # start returns once the run's start is committed: the runs start at once,
                # as the peers' invocations are gathered, so their first commits group.
                handle = await rt.start(graph, input={"x": 0})
                results.append(await handle.result())

            start = time.perf_counter()
            async with anyio.create_task_group() as tasks:
                for _ in range(runs):
                    tasks.start_soon(one)
            elapsed = time.perf_counter() - start
    for result in results:
        _check(result, "x", nodes)
    return {"wall_s": elapsed, "steps": runs * nodes}


def _file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


async def ours_memory_list(steps: int, payload_bytes: int) -> dict[str, Any]:
    graph = loop_graph(steps, "list_step", [MemoryKey(name="messages", reducer="append")])
    with _temp_db(True) as path:
        assert path is not None
        async with Runtime(path, functions=FUNCTIONS) as rt:
            result = await (await rt.start(graph, input={"i": 0})).result()
        _check(result, "i", steps)
        if len(result.memory.get("messages", [])) != steps:
            raise AssertionError(f"{len(result.memory.get('messages', []))} messages")
        # Fold the WAL into the main file so the size is what the data takes at rest.
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        size = _file_size(path) + _file_size(path + "-wal")
    return {"db_bytes": size, "payload_bytes": steps * payload_bytes}


def run_ours(fn: Callable[..., Awaitable[dict[str, Any]]], **kwargs: Any) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        return await fn(**kwargs)

    return anyio.run(call, backend="asyncio")
