"""``python -m benchmarks load [--quick]``: many live runs at once, ours against the floor.

Workload (c) of ``executor`` at scale: 2,000 and then 10,000 concurrent durable runs of
the 10-node chain whose nodes each sleep 10 ms, by us and by the floor program
(``_floor``: the same events, chain, writer and commits in plain Python), alternating,
each on a fresh SQLite file in this process. What grows with the number of live runs is
what the cyclic garbage collector has to walk, so CPU per run at 10,000 over CPU per run at
2,000 shows what each live run costs the whole process; the floor's ratio is what Python's
own machinery costs.

Heap per live run: 1,000 runs are held inside their sixth node (waiting on one event) and
``tracemalloc`` measures the heap then against before they started, divided by 1,000.

Prints ``load.cpu_per_run_2k_ms``, ``load.cpu_per_run_10k_ms``,
``load.cpu_per_run_10k_over_2k``, the floor's ``load.floor_...`` of each,
``load.heap_per_live_run_kib`` and ``load.floor_heap_per_live_run_kib``.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from benchmarks._common import figure, print_table
from benchmarks._executor_ours import SLEEP_MS, _temp_db, linear_graph
from benchmarks._floor import FloorStore, floor_run, temp_path
from benchmarks._floor_compare import _cpu
from runtime._runtime import Runtime

__all__ = ["main"]

NODES = 10
HELD_AT = 5  # the node (by x on entry) where the heap pass holds its runs
HEAP_RUNS = 1000  # runs held live for the heap pass (tracemalloc slows everything)


async def load_step(inputs: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(SLEEP_MS / 1000)
    return {"x": inputs["x"] + 1}


class _Gate:
    """Holds runs entering node HELD_AT until opened; counts them."""

    def __init__(self) -> None:
        self.entered = 0
        self.opened = asyncio.Event()

    async def step(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if inputs["x"] == HELD_AT:
            self.entered += 1
            await self.opened.wait()
        return {"x": inputs["x"] + 1}


Launch = Callable[[Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]], Awaitable[None]]


async def _ours(runs: int, step: Callable[..., Awaitable[dict[str, Any]]], probe: Any) -> float:
    graph = linear_graph(NODES, "step")
    with _temp_db(True) as path:
        # The default 15 s lease: each run's commits confirm its claim, so the runs keep
        # it while the renewals lag behind the loop (see docs/embedding.md).
        async with Runtime(path, functions={"step": step}) as rt:

            async def one() -> None:
                result = await (await rt.start(graph, input={"x": 0})).result()
                if result.status != "completed" or result.memory.get("x") != NODES:
                    raise AssertionError(f"a run ended {result.status}: {result.error}")

            return await _round(runs, one, probe)


async def _floor(runs: int, step: Callable[..., Awaitable[dict[str, Any]]], probe: Any) -> float:
    with tempfile.TemporaryDirectory(prefix="magistrate-floor-") as directory:
        store = FloorStore(temp_path(directory))
        try:

            async def one() -> None:
                memory = await floor_run(store, NODES, step, {"x": 0})
                if memory.get("x") != NODES:
                    raise AssertionError(f"a floor run ended with x={memory.get('x')}")

            return await _round(runs, one, probe)
        finally:
            store.close()


async def _round(runs: int, one: Callable[[], Awaitable[None]], probe: Any) -> float:
    """CPU seconds of ``runs`` runs at once (``probe``, if given, runs beside them)."""
    gc.collect()
    cpu = _cpu()
    async with anyio.create_task_group() as tasks:
        if probe is not None:
            tasks.start_soon(probe)
        for _ in range(runs):
            tasks.start_soon(one)
    return _cpu() - cpu


def cpu_per_run_ms(side: Any, runs: int) -> float:
    return asyncio.run(side(runs, load_step, None)) / runs * 1000


def heap_per_live_run_kib(side: Any, runs: int) -> float:
    """Heap held per run while ``runs`` runs wait inside node HELD_AT."""
    gate = _Gate()
    measured: list[float] = []

    async def probe() -> None:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        while gate.entered < runs:  # noqa: ASYNC110  (polls a plain counter)
            await asyncio.sleep(0.01)
        gc.collect()
        measured.append((tracemalloc.get_traced_memory()[0] - before) / runs / 1024)
        gate.opened.set()

    tracemalloc.start()
    try:
        asyncio.run(side(runs, gate.step, probe))
    finally:
        tracemalloc.stop()
    return measured[0]


def main(quick: bool) -> None:
    rounds = 1 if quick else 3
    print(
        f"load benchmark ({'quick' if quick else 'full'}): {rounds} alternating round(s) of "
        f"2,000 and 10,000 concurrent durable runs ({NODES} nodes sleeping {SLEEP_MS:g} ms), "
        f"ours and the floor; heap per live run at {HEAP_RUNS:,} runs (tracemalloc)"
    )
    started = time.perf_counter()
    cpu: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for runs in (2000, 10000):
            for name, side in (("ours", _ours), ("floor", _floor)):
                cpu.setdefault((name, runs), []).append(cpu_per_run_ms(side, runs))
    med = {key: statistics.median(values) for key, values in cpu.items()}
    heap = {
        name: heap_per_live_run_kib(side, 2000)
        for name, side in (("ours", _ours), ("floor", _floor))
    }
    growth = {name: med[(name, 10000)] / med[(name, 2000)] for name in ("ours", "floor")}
    print_table(
        f"load: CPU per run (getrusage, medians) and heap per live run; "
        f"{time.perf_counter() - started:.0f} s",
        ("system", "CPU/run at 2k", "CPU/run at 10k", "10k / 2k", "heap per live run"),
        [
            (
                name,
                f"{med[(name, 2000)]:.3f} ms",
                f"{med[(name, 10000)]:.3f} ms",
                f"{growth[name]:.2f} x",
                f"{heap[name]:.1f} KiB",
            )
            for name in ("ours", "floor")
        ],
    )
    target = growth["floor"] + 0.1
    print(
        f"targets: 10k/2k <= floor + 0.1 = {target:.2f}: "
        f"{'met' if growth['ours'] <= target else 'NOT met'}; heap per live run <= 12 KiB: "
        f"{'met' if heap['ours'] <= 12 else 'NOT met'}"
    )
    print()
    for name, prefix in (("ours", "load."), ("floor", "load.floor_")):
        figure(f"{prefix}cpu_per_run_2k_ms", med[(name, 2000)], "ms")
        figure(f"{prefix}cpu_per_run_10k_ms", med[(name, 10000)], "ms")
        figure(f"{prefix}cpu_per_run_10k_over_2k", growth[name], "x")
        figure(f"{prefix}heap_per_live_run_kib", heap[name], "KiB")
