"""The cost of one LLM turn as the conversation grows.

One LLM node runs ``TURNS`` turns through the real Runtime, executor and LLM node on the
in-memory log (``Runtime(None)``): each turn the scripted model calls a cheap async tool
with new arguments (no stall), then the node sets its output and stops. The model answers
at once, so the time between two consecutive model calls is the node's own cost of one
turn: recording the turn, running the tool, judging, recording the results and verdict,
and building the next request. No compaction happens (the context budget is unbounded),
so the conversation grows by two messages a turn.

The figure is the median turn time around turn 500 (turns 490-510) over the median
around turn 10 (turns 5-15), each the median over repetitions of the run. A turn whose
work grows with the conversation would show a ratio far above 1.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import time
from dataclasses import dataclass

import anyio

from runtime._runtime import Runtime
from runtime.llm._tools import tool
from runtime.providers._base import LlmRequest, LlmResponse, ToolCall
from runtime.providers._scripted import ScriptedProvider, reply
from runtime.spec._model import GraphSpec, NodeSpec

__all__ = ["TurnCost", "measure", "turn_cost_500_over_10"]

TURNS = 520
EARLY = range(5, 16)
LATE = range(490, 511)


@tool
async def step(i: int) -> str:
    """Do one cheap step of work."""
    return f"step {i} done"


async def _one_run(turns: int) -> list[float]:
    """Seconds between consecutive model calls (entry i: the turn that followed call i+1)."""
    stamps: list[float] = []

    def model(request: LlmRequest) -> LlmResponse:
        stamps.append(time.perf_counter())
        n = len(stamps)
        if n <= turns:
            return reply("", ToolCall(id=f"c{n}", name="step", arguments={"i": n}))
        if n == turns + 1:
            return reply(
                "", ToolCall(id="out", name="set_output", arguments={"key": "a", "value": n})
            )
        return reply("done")

    node = NodeSpec(
        id="worker", kind="llm", tools=["step"], output_keys=["a"], max_iterations=turns + 5
    )
    graph = GraphSpec(id="turns", nodes=[node], entry_node="worker")
    async with Runtime(
        None,
        # The scripted model's own check of the whole conversation (wire_error) is the
        # model's cost, like a real provider encoding the request, not the node's.
        provider=ScriptedProvider(model, check_wire=False),
        tools=[step],
        context_budget_tokens=10**12,
    ) as rt:
        result = await (await rt.start(graph)).result()
    if result.status != "completed":
        raise RuntimeError(f"the benchmark run ended {result.status}: {result.error}")
    return [later - earlier for earlier, later in itertools.pairwise(stamps)]


@dataclass(frozen=True)
class TurnCost:
    """Median seconds per turn around turn 10 and turn 500, and their ratio."""

    early_s: float
    late_s: float
    repetitions: int

    @property
    def ratio(self) -> float:
        return self.late_s / self.early_s


async def measure(repetitions: int) -> TurnCost:
    """Run the workload ``repetitions`` times; medians per turn, then over each window."""
    runs = []
    for _ in range(repetitions):
        gc.collect()
        runs.append(await _one_run(TURNS))
    per_turn = [statistics.median(run[i] for run in runs) for i in range(len(runs[0]))]
    return TurnCost(
        early_s=statistics.median(per_turn[i] for i in EARLY),
        late_s=statistics.median(per_turn[i] for i in LATE),
        repetitions=repetitions,
    )


def turn_cost_500_over_10(quick: bool = False) -> float:
    """The figure ``llm.turn_cost_500_over_10``: cost per turn at turn 500 over turn 10.

    Runs its own event loop (call it outside one; inside, await :func:`measure`).
    """
    return anyio.run(measure, 3 if quick else 9).ratio
