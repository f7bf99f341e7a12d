"""Ours against the floor (``_floor``) in this process, in alternating rounds.

Each round of each side runs on a fresh SQLite file (or no store) after one untimed
warm-up run, and measures around the timed part only: wall time, the process's CPU
(``getrusage``: the loop thread and the writer thread), the loop thread's own CPU, and
generation-0 collections (``gc.get_stats()`` deltas, default thresholds). The figures
are medians over the rounds of each side's value and of the per-round ratios.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from benchmarks._common import figure, format_number, print_table
from benchmarks._executor_ours import FUNCTIONS, _temp_db, linear_graph, sleeping_step, step
from benchmarks._floor import FloorStore, Step, floor_run, temp_path
from runtime._runtime import Runtime

__all__ = [
    "FloorSizes",
    "Round",
    "compare",
    "floor_figures",
    "floor_round",
    "ours_round",
    "print_floor",
]


@dataclass(frozen=True)
class Round:
    """One side's measured part of one round."""

    wall_s: float
    cpu_s: float
    loop_cpu_s: float
    gen0: int
    steps: int
    commits: int = 0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _gen0() -> int:
    return int(gc.get_stats()[0]["collections"])


async def _timed(
    body: Callable[[], Awaitable[None]], steps: int, commits: Callable[[], int]
) -> Round:
    gc.collect()
    gen0, cpu, loop_cpu, wall = _gen0(), _cpu(), time.thread_time(), time.perf_counter()
    committed = commits()
    await body()
    return Round(
        wall_s=time.perf_counter() - wall,
        cpu_s=_cpu() - cpu,
        loop_cpu_s=time.thread_time() - loop_cpu,
        gen0=_gen0() - gen0,
        steps=steps,
        commits=commits() - committed,
    )


async def _gather(runs: int, one: Callable[[], Awaitable[None]]) -> None:
    async with anyio.create_task_group() as tasks:
        for _ in range(runs):
            tasks.start_soon(one)


def _expect(memory: dict[str, Any], nodes: int) -> None:
    if memory.get("x") != nodes:
        raise AssertionError(f"a run ended with x={memory.get('x')!r}, expected {nodes}")


async def ours_round(nodes: int, runs: int, concurrent: bool, store: bool) -> Round:
    """Our runs of the linear graph: ``runs`` at once (``concurrent``, nodes sleeping
    10 ms) or one after another (nodes returning at once)."""
    graph = linear_graph(nodes, "sleeping_step" if concurrent else "step")
    with _temp_db(store) as path:
        async with Runtime(path, functions=FUNCTIONS) as rt:

            async def one() -> None:
                result = await (await rt.start(graph, input={"x": 0})).result()
                if result.status != "completed":
                    raise AssertionError(f"run ended {result.status}: {result.error}")
                _expect(result.memory, nodes)

            await one()

            async def body() -> None:
                if concurrent:
                    await _gather(runs, one)
                else:
                    for _ in range(runs):
                        await one()

            store = rt.store

            def commits() -> int:
                return 0 if store is None else store.statistics().batches

            return await _timed(body, runs * nodes, commits)


async def floor_round(nodes: int, runs: int, concurrent: bool, store: bool) -> Round:
    """The floor's runs, as :func:`ours_round`."""
    chosen: Step = sleeping_step if concurrent else step
    with tempfile.TemporaryDirectory(prefix="magistrate-floor-") as directory:
        floor = FloorStore(temp_path(directory)) if store else None
        try:

            async def one() -> None:
                _expect(await floor_run(floor, nodes, chosen, {"x": 0}), nodes)

            await one()

            async def body() -> None:
                if concurrent:
                    await _gather(runs, one)
                else:
                    for _ in range(runs):
                        await one()

            return await _timed(body, runs * nodes, lambda: 0 if floor is None else floor.commits)
        finally:
            if floor is not None:
                floor.close()


@dataclass(frozen=True)
class Comparison:
    """Medians over alternating rounds of ours and the floor."""

    ours: list[Round]
    floor: list[Round]

    def median(self, side: str, what: Callable[[Round], float]) -> float:
        return statistics.median(what(r) for r in getattr(self, side))

    def ratio(self, what: Callable[[Round], float]) -> float:
        """The median of the per-round ratios ours / floor."""
        return statistics.median(
            what(o) / what(f) for o, f in zip(self.ours, self.floor, strict=True) if what(f)
        )


def compare(rounds: int, nodes: int, runs: int, concurrent: bool, store: bool) -> Comparison:
    """``rounds`` alternating rounds (ours, then the floor), each in a new event loop."""
    ours: list[Round] = []
    floor: list[Round] = []
    for _ in range(rounds):
        ours.append(asyncio.run(ours_round(nodes, runs, concurrent, store)))
        floor.append(asyncio.run(floor_round(nodes, runs, concurrent, store)))
    return Comparison(ours, floor)


# ---------------------------------------------------------------------------- spec reuse


async def _start_cost(fresh: bool, runs: int) -> float:
    """Median seconds of starting and finishing an in-memory run from the same GraphSpec
    object each time, or from a new equal one (built before the clock starts)."""
    reused = linear_graph(10, "step")
    times: list[float] = []
    async with Runtime(None, functions=FUNCTIONS) as rt:
        for _ in range(runs + 1):
            graph = linear_graph(10, "step") if fresh else reused
            started = time.perf_counter()
            await (await rt.start(graph, input={"x": 0})).result()
            times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def fresh_spec_extra_ms(rounds: int, runs: int) -> float:
    """Median over alternating rounds of (fresh spec - reused spec) per run, in ms."""
    extra: list[float] = []
    for _ in range(rounds):
        reused = asyncio.run(_start_cost(False, runs))
        fresh = asyncio.run(_start_cost(True, runs))
        extra.append((fresh - reused) * 1000)
    return statistics.median(extra)


# ---------------------------------------------------------------------------- report


@dataclass(frozen=True)
class FloorSizes:
    rounds: int
    linear_runs: int
    spec_runs: int
    nodes: int = 10
    concurrent_runs: int = 200


def floor_figures(sizes: FloorSizes) -> list[tuple[str, float, str, float | None]]:
    """(figure name, value, unit, target bound or None) for ours against the floor."""
    n, c_runs = sizes.nodes, sizes.concurrent_runs
    a = compare(sizes.rounds, n, sizes.linear_runs, concurrent=False, store=True)
    c = compare(sizes.rounds, n, c_runs, concurrent=True, store=True)
    c0 = compare(sizes.rounds, n, c_runs, concurrent=True, store=False)

    def cpu(r: Round) -> float:
        return r.cpu_s

    def loop(r: Round) -> float:
        return r.loop_cpu_s

    def wall(r: Round) -> float:
        return r.wall_s

    def commits(r: Round) -> float:
        return float(r.commits)

    def gen0_per_1k(side: str) -> float:
        measured = [r for comp in (a, c) for r in getattr(comp, side)]
        return 1000 * sum(r.gen0 for r in measured) / sum(r.steps for r in measured)

    ours_gen0, floor_gen0 = gen0_per_1k("ours"), gen0_per_1k("floor")
    ms = 1000.0
    return [
        ("executor.a.cpu_ms", a.median("ours", cpu) * ms, "ms", None),
        ("executor.a.floor_cpu_ms", a.median("floor", cpu) * ms, "ms", None),
        ("executor.a.cpu_over_floor", a.ratio(cpu), "x", 1.3),
        ("executor.a.loop_cpu_over_floor", a.ratio(loop), "x", None),
        ("executor.c.wall_ms", c.median("ours", wall) * ms, "ms", None),
        ("executor.c.floor_wall_ms", c.median("floor", wall) * ms, "ms", None),
        ("executor.c.wall_over_floor", c.ratio(wall), "x", 1.3),
        ("executor.c.cpu_ms", c.median("ours", cpu) * ms, "ms", None),
        ("executor.c.floor_cpu_ms", c.median("floor", cpu) * ms, "ms", None),
        ("executor.c.cpu_over_floor", c.ratio(cpu), "x", 2.0),
        ("executor.c.loop_cpu_over_floor", c.ratio(loop), "x", None),
        ("executor.c.commits_per_round", c.median("ours", commits), "", None),
        ("executor.c.floor_commits_per_round", c.median("floor", commits), "", None),
        ("executor.c.nostore_cpu_ms", c0.median("ours", cpu) * ms, "ms", None),
        ("executor.c.floor_nostore_cpu_ms", c0.median("floor", cpu) * ms, "ms", None),
        ("executor.c.nostore_cpu_over_floor", c0.ratio(cpu), "x", 3.0),
        ("executor.gen0_per_1k_steps", ours_gen0, "", None),
        ("executor.floor_gen0_per_1k_steps", floor_gen0, "", None),
        ("executor.gen0_over_floor", ours_gen0 / floor_gen0 if floor_gen0 else 0.0, "x", 1.5),
        (
            "executor.fresh_spec_extra_ms",
            fresh_spec_extra_ms(max(3, sizes.rounds // 2), sizes.spec_runs),
            "ms",
            0.3,
        ),
    ]


def print_floor(sizes: FloorSizes) -> None:
    """Ours against the floor program, in this process, alternating rounds."""
    started = time.perf_counter()
    figures = floor_figures(sizes)
    rows = [
        (
            name,
            f"{format_number(value)} {unit}".rstrip(),
            "" if bound is None else f"<= {format_number(bound)}",
            "" if bound is None else ("met" if value <= bound else "NOT met"),
        )
        for name, value, unit, bound in figures
    ]
    print_table(
        f"against the floor (benchmarks/_floor.py: the same events, chain, writer and "
        f"commits in plain Python); medians of {sizes.rounds} alternating rounds; CPU is "
        f"getrusage (both threads); {time.perf_counter() - started:.0f} s",
        ("figure", "measured", "target", "result"),
        rows,
    )
    for name, value, unit, _ in figures:
        figure(name, value, unit)
