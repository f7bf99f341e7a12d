"""Replaying a recorded run against its graph: ``Runtime.replay`` of a 10,000-event run.

``python -m benchmarks replay [--quick]``. A Runtime on a SQLite file records a loop of
an LLM node (a scripted model: a ``set_output`` turn, then a text turn its judge
accepts; an isolated conversation) and a function node that counts, until the run
holds about 10,000 events. Then, in a fresh Runtime on the same file (no model, no
functions: the replay serves both from the log), ``replay(run_id)``: the log read and
verified, the whole run executed again in memory, and the two logs compared. Median of
the repetitions; target: under 1 s.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import anyio

from runtime import EdgeSpec, GraphSpec, LlmRequest, LlmResponse, NodeSpec, Runtime
from runtime.testing import ScriptedProvider, reply, tool_call

from ._common import Timer, figure, print_table

__all__ = ["main"]

#: Loops of the graph: each records 15 events (an LLM visit of 2 turns, a count).
LOOPS = 667


def _graph() -> GraphSpec:
    return GraphSpec(
        id="replayed",
        nodes=[
            NodeSpec(id="draft", kind="llm", output_keys=["text"], input_keys=["n"]),
            NodeSpec(id="count", function="count", input_keys=["n"], output_keys=["n"]),
        ],
        edges=[
            EdgeSpec(source="draft", target="count"),
            EdgeSpec(
                source="count", target="draft", condition="conditional", expression=f"n < {LOOPS}"
            ),
        ],
        entry_node="draft",
        max_steps=2 * LOOPS + 10,
        conversation_mode="isolated",
        durability="async",
    )


def _model(request: LlmRequest) -> LlmResponse:
    if request.messages and request.messages[-1].role == "tool":
        return reply("done")
    return reply("", tool_call("set_output", key="text", value="a draft"))


def count(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": int(inputs.get("n", 0)) + 1}


async def _record(path: Path) -> tuple[str, int]:
    provider = ScriptedProvider(_model, check_wire=False)
    async with Runtime(path, provider=provider, functions={"count": count}) as rt:
        handle = await rt.start(_graph(), input={"n": 0})
        result = await handle.result()
        assert result.status == "completed", result
        return handle.run_id, len(await rt.read_events(handle.run_id))


async def _measure(quick: bool) -> dict[str, float]:
    reps = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        run_id, events = await _record(path)
        times = []
        async with Runtime(path) as rt:
            for _ in range(reps):
                with Timer() as t:
                    report = await rt.replay(run_id)
                times.append(t.seconds)
                assert report.equal, report.summary()
        return {"events": float(events), "replay": statistics.median(times)}


def main(quick: bool = False) -> None:
    figures = anyio.run(_measure, quick)
    print_table(
        f"Replaying a run of {int(figures['events'])} events against its graph (median)",
        ["what", "value", "unit"],
        [["replay: read, verify, run again in memory, compare", figures["replay"], "s"]],
    )
    figure("replay.10k_events_s", figures["replay"], "s")
