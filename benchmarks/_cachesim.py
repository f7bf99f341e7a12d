"""Instructions, cache misses and mispredicted branches per durable (a) step, ours and the floor.

``python -m benchmarks._cachesim [--runs 40]`` runs workload (a) (the 10-node chain, runs one
after another, durable on a fresh SQLite file) under ``valgrind --tool=callgrind
--cache-sim=yes --branch-sim=yes --separate-threads=yes``: for each side, ours and the floor
program (``_floor``), a process doing 10 runs and one doing ``10 + runs``, and prints per
step (the difference over the steps between them, a run's start and end included) for the
loop thread and the writer thread (the busiest other thread): instructions, first-level
data and instruction cache misses, and mispredicted branches (conditional and indirect).

The caches and the branch predictor are simulated, so the figures do not move with the
machine's load or model: they say what a step asks of a core (how much code, and how
varied its code and data are), not how fast a given core runs it. Two machines that run
the same instructions at different speeds show it: docs/benchmarks.md, "The same code on
a second machine". Four valgrind processes, two at a time: a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from benchmarks._floor_compare import floor_round, ours_round

__all__ = ["main"]

_BASE_RUNS = 10
#: What is printed, from callgrind's events: (label, events summed).
_FIGURES = (
    ("instructions", ("Ir",)),
    ("L1 data misses", ("D1mr", "D1mw")),
    ("L1 instruction misses", ("I1mr",)),
    ("mispredicted branches", ("Bcm", "Bim")),
    ("  of them indirect", ("Bim",)),
)


def _totals(path: str) -> dict[str, int]:
    """The event totals of one thread's callgrind file."""
    names: list[str] = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith("totals:"):
                return dict(zip(names, map(int, line.split()[1:]), strict=True))
    raise RuntimeError(f"no totals in {path}")


def _threads(prefix: str) -> tuple[dict[str, int], dict[str, int]]:
    """The loop thread's totals (thread 1) and the busiest other thread's (the writer)."""
    files = sorted(glob.glob(f"{prefix}-*"))
    totals = {path: _totals(path) for path in files}
    main = totals.pop(f"{prefix}-01")
    writer = max(totals.values(), key=lambda t: t["Ir"])
    return main, writer


def _measure(side: str, runs: int, directory: str) -> tuple[dict[str, int], dict[str, int]]:
    prefix = os.path.join(directory, f"{side}-{runs}")
    command = [
        "valgrind",
        "--tool=callgrind",
        "--cache-sim=yes",
        "--branch-sim=yes",
        "--separate-threads=yes",
        f"--callgrind-out-file={prefix}",
        sys.executable,
        "-m",
        "benchmarks._cachesim",
        "--child",
        side,
        "--runs",
        str(runs),
    ]
    subprocess.run(command, capture_output=True, text=True, check=True)
    return _threads(prefix)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._cachesim", description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="runs between the two processes")
    parser.add_argument("--child", choices=("ours", "floor"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        side = ours_round if args.child == "ours" else floor_round
        asyncio.run(side(10, args.runs, False, True))
        return
    steps = 10 * args.runs
    with tempfile.TemporaryDirectory(prefix="magistrate-cachesim-") as directory:
        jobs = [(s, r) for s in ("ours", "floor") for r in (_BASE_RUNS, _BASE_RUNS + args.runs)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            measured = dict(
                zip(jobs, pool.map(lambda job: _measure(*job, directory), jobs), strict=True)
            )
    print(f"per durable (a) step ({_BASE_RUNS + args.runs} runs minus {_BASE_RUNS}), simulated")
    for index, thread in enumerate(("loop thread", "writer thread")):
        print(f"{thread + ':':<26}{'ours':>10}{'floor':>10}{'ratio':>8}")
        for label, events in _FIGURES:
            per_step = {}
            for side in ("ours", "floor"):
                few = measured[(side, _BASE_RUNS)][index]
                more = measured[(side, _BASE_RUNS + args.runs)][index]
                per_step[side] = sum(more[e] - few[e] for e in events) / steps
            ratio = per_step["ours"] / per_step["floor"] if per_step["floor"] else 0.0
            ours, floor = per_step["ours"], per_step["floor"]
            print(f"  {label:<24}{ours:>10,.0f}{floor:>10,.0f}{ratio:>7.2f}x")


if __name__ == "__main__":
    main()
