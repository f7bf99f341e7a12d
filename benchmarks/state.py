"""Reading a long run's state: ``get_state`` and ``resume`` of a 100k-event run.

``python -m benchmarks state [--quick]``. A Runtime on a SQLite file runs a loop graph
of one function node (durability "async") for 20,000 steps (5 events each: node start,
two memory writes, one of them to an ``append`` key that ends with 20,000 items,
completion, edge) and pauses at a gate: a run of ~100k events. Then, each in a fresh
Runtime (a new process would do the same reads):

- ``get_state`` through the run's snapshot (the run's owner saves one every 1,000 events,
  bound to the log by a ``snapshot.taken`` event that the read checks, with the chain from
  it to the run's head), and with every snapshot deleted first, on a copy of the file (the
  whole log folded: what a read costs without them);
- ``resume``: the approval of the gate, from the call to the returned handle (the log
  read through the snapshot and folded, the approval appended, the log read again and
  the executor started), each on its own copy of the file, since it runs the run on.

It also prints the cost of one loop step early and late in the run (the ``append`` key
holds ~1,000 vs ~19,000 items: a write must not copy the list), and the LLM node's
``llm.turn_cost_500_over_10`` (see ``benchmarks._turn_cost``) and the cost of an LLM node's
start at visit 400 of a loop over visit 10, ``llm.start_cost_400_over_10`` (see
``benchmarks._llm_start``). Medians; targets: 20 ms for
each 100k figure.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from runtime import EdgeSpec, GraphSpec, MemoryKey, NodeSpec, Runtime

from ._common import Timer, figure, print_table

__all__ = ["main"]

STEPS = 20_000


def _graph() -> GraphSpec:
    return GraphSpec(
        id="long",
        nodes=[
            NodeSpec(id="count", kind="function", function="count"),
            NodeSpec(id="gate", kind="function", function="count"),
        ],
        edges=[
            EdgeSpec(
                source="count", target="count", condition="conditional", expression=f"n < {STEPS}"
            ),
            EdgeSpec(source="count", target="gate", condition="always"),
        ],
        entry_node="count",
        pause_nodes=["gate"],
        max_steps=STEPS + 10,
        memory=[MemoryKey(name="seen", reducer="append")],
        # Node boundaries written behind: a step's cost is then the runtime's, not a commit's.
        durability="async",
    )


class _Counter:
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, inputs: dict[str, Any]) -> dict[str, Any]:
        self.stamps.append(time.perf_counter())
        n = int(inputs.get("n", 0)) + 1
        return {"n": n, "seen": n}


async def _build(path: Path) -> tuple[str, int, list[float]]:
    counter = _Counter()
    async with Runtime(path, functions={"count": counter}) as rt:
        handle = await rt.start(_graph())
        result = await handle.result()
        assert result.status == "paused", result
        events = len(await rt.read_events(handle.run_id))
    return handle.run_id, events, counter.stamps


async def _get_state_ms(path: Path, run_id: str, reps: int, *, snapshots: bool) -> float:
    if not snapshots:
        # On a copy: a read saves no snapshot (only the run's owner does), so the ones
        # deleted here would be gone for the resume figures too.
        copy = path.with_name("no-snapshots.db")
        shutil.copyfile(path, copy)
        path = copy
    times = []
    for _ in range(reps):
        async with Runtime(path, functions={"count": _Counter()}) as rt:
            assert rt.store is not None
            await rt.get_state(run_id)  # the first read opens the file's caches
            if not snapshots:
                await rt.store.delete_snapshots(run_id)
            with Timer() as t:
                state = await rt.get_state(run_id)
            times.append(t.seconds * 1000)
            assert state.status == "paused" and len(state.memory["seen"]) == STEPS
    return statistics.median(times)


async def _resume_ms(path: Path, run_id: str, reps: int, workdir: Path) -> float:
    times = []
    for i in range(reps):
        copy = workdir / f"copy{i}.db"
        shutil.copyfile(path, copy)
        async with Runtime(copy, functions={"count": _Counter()}) as rt:
            assert rt.store is not None
            await rt.store.get_run(run_id)  # open the file first, as a live runtime has
            with Timer() as t:
                approved = await rt.approve(run_id, by="benchmark")  # passes the gate
            times.append(t.seconds * 1000)
            assert approved is not None
            result = await approved.result()
            assert result.status == "completed", result
        copy.unlink()
    return statistics.median(times)


def _step_us(stamps: list[float], start: int, count: int) -> float:
    gaps = [
        b - a
        for a, b in zip(
            stamps[start : start + count], stamps[start + 1 : start + count + 1], strict=False
        )
    ]
    return statistics.median(gaps) * 1e6


async def _measure(quick: bool) -> dict[str, float]:
    reps = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = workdir / "runs.db"
        run_id, events, stamps = await _build(path)
        return {
            "events": float(events),
            "get_state": await _get_state_ms(path, run_id, reps, snapshots=True),
            "get_state_cold": await _get_state_ms(path, run_id, reps, snapshots=False),
            "resume": await _resume_ms(path, run_id, reps, workdir),
            "step_early": _step_us(stamps, 1000, 1000),
            "step_late": _step_us(stamps, STEPS - 1001, 1000),
        }


def main(quick: bool = False) -> None:
    figures = anyio.run(_measure, quick)
    try:
        from ._turn_cost import turn_cost_500_over_10
    except ImportError:  # the LLM turn benchmark is not part of this checkout
        turn_ratio = None
    else:
        turn_ratio = turn_cost_500_over_10(quick)
    from ._llm_start import llm_start_late_over_early

    start_early, start_late, start_ratio = llm_start_late_over_early(quick)
    rows: list[list[object]] = [
        ["get_state, through the snapshot", figures["get_state"], "ms"],
        ["get_state, no snapshot (whole log folded)", figures["get_state_cold"], "ms"],
        ["resume, through the snapshot", figures["resume"], "ms"],
        ["loop step, ~1,000 items in the append key", figures["step_early"], "us"],
        ["loop step, ~19,000 items in the append key", figures["step_late"], "us"],
    ]
    if turn_ratio is not None:
        rows.append(["LLM turn cost, turn 500 over turn 10", turn_ratio, "x"])
    rows.append(["LLM node start, visit 10 of a loop", start_early, "ms"])
    rows.append(["LLM node start, visit 400 of a loop", start_late, "ms"])
    print_table(
        f"A run of {int(figures['events'])} events on SQLite (medians)",
        ["what", "value", "unit"],
        rows,
    )
    figure("state.get_state_100k_ms", figures["get_state"], "ms")
    figure("state.get_state_100k_no_snapshot_ms", figures["get_state_cold"], "ms")
    figure("state.resume_100k_ms", figures["resume"], "ms")
    figure("state.step_us_append_1k", figures["step_early"], "us")
    figure("state.step_us_append_19k", figures["step_late"], "us")
    if turn_ratio is not None:
        figure("llm.turn_cost_500_over_10", turn_ratio, "x")
    figure("llm.start_ms_visit_400", start_late, "ms")
    figure("llm.start_cost_400_over_10", start_ratio, "x")
