"""Where a durable (c) step's CPU goes, by part of the runtime.

``python -m benchmarks._breakdown [--nostore]`` runs one warm-up and one measured round of
workload (c) (200 concurrent runs of the 10-node chain, nodes sleeping 10 ms) under
cProfile on thread CPU time, on the loop thread and, separately, on the store's writer
thread, and prints each part's share of the loop's CPU (functions grouped by the module
they live in) and the writer's heaviest functions. The profiler slows Python-level code
more than C, so the shares are proportions to compare, not costs to add up; the
unprofiled CPU per step comes from ``python -m benchmarks executor`` (``executor.c.*``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from collections import Counter
from typing import Any

import eventstore._writer as writer_module
from benchmarks._floor_compare import ours_round

__all__ = ["main", "part_of"]

#: (substring of a function's file or name, the part it belongs to), first match wins.
_PARTS = (
    ("/asyncio/", "asyncio and anyio scheduling"),
    ("selectors", "asyncio and anyio scheduling"),
    ("/anyio/", "asyncio and anyio scheduling"),
    ("sniffio", "asyncio and anyio scheduling"),
    ("_contextvars", "asyncio and anyio scheduling"),
    ("_asyncio", "asyncio and anyio scheduling"),
    ("select.epoll", "asyncio and anyio scheduling"),
    ("heapq", "asyncio and anyio scheduling"),
    ("_weakrefset", "asyncio and anyio scheduling"),  # asyncio's registry of tasks
    ("/actors/", "actors (mailboxes, references, hand-offs)"),
    ("/runtime/events/", "the fold (apply, state)"),
    ("_runlog", "run log and store front (batches, requests, answers)"),
    ("_start_on_commit", "run log and store front (batches, requests, answers)"),
    ("_foreign", "run log and store front (batches, requests, answers)"),
    ("/eventstore/", "run log and store front (batches, requests, answers)"),
    ("/runtime/engine/", "executor, step, node attempt, edges"),
    ("/runtime/spec/", "executor, step, node attempt, edges"),
    ("/runtime/control/", "a run's start and end (results, control)"),
    ("_runtime.py", "a run's start and end (results, control)"),
    ("_result.py", "a run's start and end (results, control)"),
    ("_handle.py", "a run's start and end (results, control)"),
    ("_node_factory", "a run's start and end (results, control)"),
    ("_run_logs", "a run's start and end (results, control)"),
    ("/runtime/observe/", "logs and metrics"),
    ("/logging/", "logs and metrics"),
    ("uuid", "a run's start and end (results, control)"),
    ("benchmarks", "the benchmark and its node code"),
    ("msgspec", "msgspec"),
    ("gc.collect", "(the round's explicit gc.collect: left out)"),
)


def part_of(filename: str, name: str) -> str:
    """The part of the runtime a profiled function belongs to."""
    where = f"{filename} {name}"
    for needle, part in _PARTS:
        if needle in where:
            return part
    return f"builtins: {name[:50]}"


def _profile_round(store: bool) -> tuple[Any, pstats.Stats, list[cProfile.Profile]]:
    writers: list[cProfile.Profile] = []
    original = writer_module.ThreadWriter._run

    def profiled_run(self: Any) -> None:
        profile = cProfile.Profile(time.thread_time)
        writers.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    asyncio.run(ours_round(10, 200, True, store))  # warm-up
    writer_module.ThreadWriter._run = profiled_run  # type: ignore[method-assign]
    try:
        loop = cProfile.Profile(time.thread_time)
        loop.enable()
        measured = asyncio.run(ours_round(10, 200, True, store))
        loop.disable()
    finally:
        writer_module.ThreadWriter._run = original  # type: ignore[method-assign]
    return measured, pstats.Stats(loop), writers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nostore", action="store_true", help="Runtime(None): no writer")
    args = parser.parse_args()
    measured, loop, writers = _profile_round(not args.nostore)
    parts: Counter[str] = Counter()
    for (filename, _line, name), row in loop.stats.items():  # type: ignore[attr-defined]
        parts[part_of(filename, name)] += row[2]  # tottime
    total = sum(v for k, v in parts.items() if "left out" not in k)
    print(f"measured round (profiled): {measured}")
    print(f"loop thread, profiled: {total * 1000:.0f} ms over {measured.steps} steps")
    for part, seconds in parts.most_common(16):
        print(f"  {100 * seconds / total:5.1f} %  {part}")
    if writers:
        stats = pstats.Stats(writers[0])
        for more in writers[1:]:
            stats.add(more)
        print("writer thread, heaviest functions (thread CPU, profiled):")
        stats.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
