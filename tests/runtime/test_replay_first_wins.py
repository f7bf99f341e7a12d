"""A fan-out under ``conflict_strategy: first_wins``: the write of a key another branch
claimed first is dropped and leaves no event, so the node's recorded outputs lack it. A
replay serves that node what it returned (every key it declares: else it failed) and the
key is dropped again: the run replays equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, Runtime
from runtime.events import MemoryWritten
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="fan",
    entry_node="start",
    conflict_strategy="first_wins",
    nodes=[
        function_node("start", output_keys=["seed"]),
        function_node("a", output_keys=["x", "ax"]),
        function_node("b", output_keys=["x", "bx"]),
        function_node("done", "noop"),
    ],
    edges=[
        EdgeSpec(source="start", target="a"),
        EdgeSpec(source="start", target="b"),
        EdgeSpec(source="a", target="done"),
        EdgeSpec(source="b", target="done"),
    ],
)


async def b(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(0.05)  # a finishes first and claims x
    return {"x": "from b", "bx": 2}


FUNCTIONS: dict[str, Any] = {
    "start": lambda inputs: {"seed": 1},
    "a": lambda inputs: {"x": "from a", "ax": 1},
    "b": b,
    "noop": lambda inputs: None,
}


async def test_a_first_wins_fan_out_replays_equal(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        result = await (await rt.start(GRAPH)).result()
        assert result.status == "completed", result.error
        assert result.memory["x"] == "from a" and result.memory["bx"] == 2
        events = await rt.read_events(result.run_id)
        written_by_b = [
            e.body.key
            for e in events
            if isinstance(e.body, MemoryWritten) and e.body.node_id == "b"
        ]
        assert written_by_b == ["bx"]  # b's x was dropped: no event of it
        report = await rt.replay(result.run_id)
        assert report.equal, report.summary()
