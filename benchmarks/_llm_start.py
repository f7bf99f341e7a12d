"""The cost of an LLM node's start as the run's log grows.

A loop graph visits an LLM node and a function node in turn, ``VISITS`` times, on a SQLite
file (durability "sync", conversation mode "isolated", so the node's own conversation
stays one visit long while the run's log grows by ~10 events a visit). Each visit the
scripted model sets the node's output, then answers in text; the judge accepts. The time
from the function node's return to the LLM node's first model call of the next visit is
the step's own cost: the executor records the step and starts the node, and the node
starts its attempt from the run's state. A start that read or folded the whole log would
grow with the visit number.

The figure is the median of that gap around visit 400 over the median around visit 10,
each the median over repetitions of the run.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.testing import ScriptedProvider, reply, tool_call

__all__ = ["llm_start_late_over_early", "measure"]

VISITS = 420
EARLY = range(5, 16)
LATE = range(390, 411)


def _graph() -> GraphSpec:
    return GraphSpec(
        id="visits",
        entry_node="think",
        conversation_mode="isolated",
        nodes=[
            NodeSpec(id="think", kind="llm", output_keys=["x"]),
            NodeSpec(id="count", kind="function", function="count"),
        ],
        edges=[
            EdgeSpec(source="think", target="count", condition="always"),
            EdgeSpec(
                source="count",
                target="think",
                condition="conditional",
                expression=f"n < {VISITS}",
            ),
        ],
        max_steps=2 * VISITS + 10,
    )


async def _one_run(path: Path) -> list[float]:
    """Seconds from the function node's return to the LLM node's next first call."""
    returned: list[float] = []
    first_calls: list[float] = []
    calls = 0

    def model(request: Any) -> Any:
        nonlocal calls
        if request.purpose != "turn":
            return reply('{"verdict": "ACCEPT", "confidence": 1.0}')
        calls += 1
        if calls % 2:
            first_calls.append(time.perf_counter())
            return reply("", tool_call("set_output", key="x", value=calls))
        return reply("done")

    def count(inputs: dict[str, Any]) -> dict[str, Any]:
        returned.append(time.perf_counter())
        return {"n": int(inputs.get("n", 0)) + 1}

    provider = ScriptedProvider(model, check_wire=False)
    async with Runtime(path, provider=provider, functions={"count": count}) as rt:
        result = await (await rt.start(_graph())).result()
    if result.status != "completed":
        raise RuntimeError(f"the benchmark run ended {result.status}: {result.error}")
    # Visit k (from 1) of the LLM node follows the function node's return number k - 1.
    return [first_calls[k] - returned[k - 1] for k in range(1, len(first_calls))]


async def measure(repetitions: int) -> tuple[float, float]:
    """Median gap (seconds) around visit 10 and around visit 400."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repetitions):
            gc.collect()
            runs.append(await _one_run(Path(tmp) / f"visits{i}.db"))
    per_visit = [statistics.median(run[i] for run in runs) for i in range(len(runs[0]))]
    early = statistics.median(per_visit[i] for i in EARLY)
    late = statistics.median(per_visit[i] for i in LATE)
    return early, late


def llm_start_late_over_early(quick: bool = False) -> tuple[float, float, float]:
    """(early ms, late ms, late / early) for ``llm.start_cost_400_over_10``.

    Runs its own event loop (call it outside one; inside, await :func:`measure`).
    """
    early, late = anyio.run(measure, 3 if quick else 7)
    return early * 1000, late * 1000, late / early
