"""Steady per-step figures of workload (c) with no store, for a shared machine.

``python -m benchmarks._icount [--runs 200] [--nodes 10]`` runs a process under
``valgrind --tool=callgrind`` doing one (c) round with no store (``runs`` concurrent runs of
a ``nodes``-node chain whose nodes return at once, after one warm-up round), and another
doing three, and prints the instructions per step: (three rounds - one round) / the steps
between them. Callgrind counts instructions, not time, so the figure holds still while
other work loads the machine. Each process's callgrind file is kept (its path is printed)
for ``callgrind_annotate --inclusive=yes FILE``.

``python -m benchmarks._icount --gc`` runs the same rounds without valgrind and prints
generation-0 collections per 1,000 steps (``gc.get_stats()`` deltas, default thresholds)
and the GC-tracked objects a step leaves behind (``gc.get_count()`` with the collector off
over a round: allocations less deallocations); with ``--store`` also the gen-0 collections
of three durable (c) rounds as ``executor`` runs them (a fresh SQLite file, nodes sleeping).

``python -m benchmarks._icount --live`` holds 500 durable runs inside their sixth node (as
``load`` holds its runs for the heap) and prints the GC-tracked objects each one adds, by
type (what the cyclic collector walks per live run).

``python -m benchmarks._icount --rounds N`` (what the valgrind runs execute) runs N
measured rounds and nothing else. ``--floor`` does the same with the floor program, and
``--zero-sleep`` has every node await ``asyncio.sleep(0)`` once (a hop through the loop, as
a sleeping node makes, with no time in it; without it the floor's step never suspends).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

from benchmarks._executor_ours import FUNCTIONS, linear_graph, step
from benchmarks._floor import floor_run
from benchmarks._floor_compare import floor_round, ours_round

__all__ = ["main"]


async def zero_sleep_step(inputs: dict[str, Any]) -> dict[str, Any]:
    """A node that awaits once (``asyncio.sleep(0)``), as a sleeping node does, with no time
    in it: its run's step is a hop through the loop for ours and for the floor."""
    await asyncio.sleep(0)
    return {"x": inputs["x"] + 1}


#: The node function (``--zero-sleep``: zero_sleep_step, else one that returns at once).
_CHOSEN = {"step": step}


async def _ours(rounds: int, runs: int, nodes: int, on_round: Any = None) -> None:
    from runtime._runtime import Runtime

    chosen = _CHOSEN["step"]
    graph = linear_graph(nodes, chosen.__name__)
    async with Runtime(None, functions={**FUNCTIONS, chosen.__name__: chosen}) as rt:

        async def one() -> None:
            result = await (await rt.start(graph, input={"x": 0})).result()
            if result.status != "completed" or result.memory.get("x") != nodes:
                raise AssertionError(f"run ended {result.status}: {result.error}")

        for i in range(rounds + 1):  # the first round warms up
            if on_round is not None:
                on_round(i)
            await asyncio.gather(*(one() for _ in range(runs)))
        if on_round is not None:
            on_round(rounds + 1)


async def _floor(rounds: int, runs: int, nodes: int, on_round: Any = None) -> None:
    async def one() -> None:
        memory = await floor_run(None, nodes, _CHOSEN["step"], {"x": 0})
        if memory.get("x") != nodes:
            raise AssertionError(f"a floor run ended with x={memory.get('x')!r}")

    for i in range(rounds + 1):
        if on_round is not None:
            on_round(i)
        await asyncio.gather(*(one() for _ in range(runs)))
    if on_round is not None:
        on_round(rounds + 1)


def _instructions(args: argparse.Namespace, rounds: int, out: str) -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "benchmarks._icount",
        "--rounds",
        str(rounds),
        "--runs",
        str(args.runs),
        "--nodes",
        str(args.nodes),
    ]
    command += ["--floor"] if args.floor else []
    command += ["--zero-sleep"] if args.zero_sleep else []
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _gc_figures(args: argparse.Namespace) -> None:
    side = _floor if args.floor else _ours
    rounds, steps = 3, 3 * args.runs * args.nodes
    marks: dict[int, int] = {}

    def collections(i: int) -> None:
        if i in (1, rounds + 1):
            gc.collect()
            marks[i] = gc.get_stats()[0]["collections"]

    asyncio.run(side(rounds, args.runs, args.nodes, collections))
    gen0 = (marks[rounds + 1] - marks[1]) * 1000 / steps
    counts: dict[int, int] = {}

    def tracked(i: int) -> None:
        if i == 1:
            gc.collect()
            gc.disable()
            counts[i] = gc.get_count()[0]
        elif i == 2:
            counts[i] = gc.get_count()[0]
            gc.enable()

    asyncio.run(side(1, args.runs, args.nodes, tracked))
    per_step = (counts[2] - counts[1]) / (args.runs * args.nodes)
    print(f"gen-0 collections per 1,000 steps (no store): {gen0:.2f}")
    print(f"GC-tracked objects left per step (allocated less freed, a round): {per_step:.1f}")
    if args.store:  # durable (c) rounds as the executor benchmark runs them (nodes sleep)
        side_round = floor_round if args.floor else ours_round
        measured = [asyncio.run(side_round(args.nodes, args.runs, True, True)) for _ in range(4)]
        durable = 1000 * sum(r.gen0 for r in measured[1:]) / sum(r.steps for r in measured[1:])
        print(f"gen-0 collections per 1,000 steps (durable, nodes sleeping): {durable:.2f}")


def _live_objects(floor: bool, runs: int = 500) -> None:
    from benchmarks import load

    gate = load._Gate()
    before: set[int] = set()

    async def probe() -> None:
        gc.collect()
        before.update(id(o) for o in gc.get_objects())
        while gate.entered < runs:  # noqa: ASYNC110  (polls a plain counter)
            await asyncio.sleep(0.01)
        gc.collect()
        new = Counter(type(o).__qualname__ for o in gc.get_objects() if id(o) not in before)
        print(f"GC-tracked objects per live run: {sum(new.values()) / runs:.1f}")
        for name, count in new.most_common(25):
            print(f"  {count / runs:6.2f} {name}")
        gate.opened.set()

    asyncio.run((load._floor if floor else load._ours)(runs, gate.step, probe))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._icount", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, help="run N measured rounds only (under valgrind)")
    parser.add_argument("--floor", action="store_true", help="the floor program instead of ours")
    parser.add_argument("--gc", action="store_true", help="gen-0 collections, tracked objects")
    parser.add_argument("--store", action="store_true", help="with --gc: durable rounds too")
    parser.add_argument("--live", action="store_true", help="tracked objects per live run")
    parser.add_argument("--zero-sleep", action="store_true", help="nodes await asyncio.sleep(0)")
    parser.add_argument("--keep", default=tempfile.gettempdir(), help="where callgrind files go")
    args = parser.parse_args()
    if args.zero_sleep:
        _CHOSEN["step"] = zero_sleep_step
    if args.rounds is not None:
        side = _floor if args.floor else _ours
        asyncio.run(side(args.rounds, args.runs, args.nodes))
        return
    if args.gc:
        _gc_figures(args)
        return
    if args.live:
        _live_objects(args.floor)
        return
    name = "floor" if args.floor else "ours"
    files = [os.path.join(args.keep, f"icount-{name}-{r}.{os.getpid()}.out") for r in (1, 3)]
    one, three = (_instructions(args, r, f) for r, f in zip((1, 3), files, strict=True))
    steps = 2 * args.runs * args.nodes
    print(f"instructions: 1 round {one:,}, 3 rounds {three:,}")
    print(f"instructions per step ({name}, no store): {(three - one) / steps:,.0f}")
    print(f"callgrind files: {files[0]} {files[1]}")


if __name__ == "__main__":
    main()
