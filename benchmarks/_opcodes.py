"""Bytecode instructions per durable (a) step, ours against the floor, by part.

``python -m benchmarks._opcodes [--runs 20] [--top 15]`` runs workload (a) (the 10-node
chain, runs one after another, durable on a fresh SQLite file) under a ``sys.settrace``
hook that counts the interpreter's opcode events per function, on the loop thread and on
the store's writer thread, for ours and for the floor program (``_floor``). Each side
does a warm-up process-wide, then a round of 5 runs and a round of ``5 + runs`` runs; the
figures are the difference over the steps between them (a run's start and end included,
a tenth of them per step), so set-up and imports cancel out.

Counting opcodes is deterministic: it does not move with the machine's load, and it
shows where the Python-level work of a step goes (the parts are ``_breakdown``'s). It
does not count what C code does inside one opcode (SQLite, hashing, msgspec, the
kernel): ``_icount`` and callgrind measure instructions for that.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

from benchmarks._breakdown import part_of
from benchmarks._floor_compare import Round, floor_round, ours_round

__all__ = ["main", "opcodes_per_step"]

#: (thread, file, first line, function) -> opcode events.
Counts = Counter[tuple[str, str, int, str]]
Side = Callable[[int, int, bool, bool], Coroutine[Any, Any, Round]]

_BASE_RUNS = 5


def _count(side: Side, runs: int) -> Counts:
    counts: Counts = Counter()
    main = threading.get_ident()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            thread = "loop" if threading.get_ident() == main else "writer"
            counts[(thread, code.co_filename, code.co_firstlineno, code.co_name)] += 1
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local

    threading.settrace(trace)
    sys.settrace(trace)
    try:
        asyncio.run(side(10, runs, False, True))
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return counts


def opcodes_per_step(side: Side, runs: int) -> dict[tuple[str, str, int, str], float]:
    """Opcode events per step of ``side`` (ours_round or floor_round), by function."""
    asyncio.run(side(10, _BASE_RUNS, False, True))  # warm-up: imports, caches
    base = _count(side, _BASE_RUNS)
    more = _count(side, _BASE_RUNS + runs)
    steps = 10 * runs
    return {key: (more[key] - base[key]) / steps for key in more.keys() | base.keys()}


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/python3.11/", "/work/main/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 2)[-1] if "/" in filename else filename


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20, help="runs between the two rounds")
    parser.add_argument("--top", type=int, default=15, help="functions listed per thread and side")
    args = parser.parse_args()
    sides = {"ours": ours_round, "floor": floor_round}
    measured = {name: opcodes_per_step(side, args.runs) for name, side in sides.items()}
    for thread in ("loop", "writer"):
        parts: dict[str, defaultdict[str, float]] = {name: defaultdict(float) for name in sides}
        for name, counts in measured.items():
            for (where, filename, _, function), value in counts.items():
                if where == thread:
                    parts[name][part_of(filename, function)] += value
        totals = {name: sum(parts[name].values()) for name in sides}
        print(
            f"{thread} thread: opcodes per durable (a) step, ours {totals['ours']:.0f}, "
            f"floor {totals['floor']:.0f}"
        )
        for part in sorted(
            parts["ours"].keys() | parts["floor"].keys(),
            key=lambda p: -(parts["ours"][p] + parts["floor"][p]),
        ):
            ours, floor = parts["ours"][part], parts["floor"][part]
            if abs(ours) >= 0.5 or abs(floor) >= 0.5:
                print(f"  {ours:7.0f} {floor:7.0f}  {part}")
        for name in sides:
            print(f"  {name}, heaviest functions on the {thread} thread:")
            heaviest = sorted(
                ((v, k) for k, v in measured[name].items() if k[0] == thread), reverse=True
            )
            for value, (_, filename, line, function) in heaviest[: args.top]:
                print(f"  {value:7.1f}  {_short(filename)}:{line} {function}")


if __name__ == "__main__":
    main()
