"""A node whose code calls ``sys.exit()`` (or raises KeyboardInterrupt in its worker
thread) fails that attempt like any other error, retried and recorded; the process that
embeds the runtime, and its other runs, go on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import RetryPolicy, Runtime
from runtime.testing import function_node, linear_graph

pytestmark = pytest.mark.anyio


def exits_in_a_thread(inputs: dict[str, Any]) -> dict[str, Any]:
    sys.exit(3)


def interrupts_in_a_thread(inputs: dict[str, Any]) -> dict[str, Any]:
    raise KeyboardInterrupt


async def exits_on_the_loop(inputs: dict[str, Any]) -> dict[str, Any]:
    sys.exit(0)


def fine(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}


FUNCTIONS = {
    "exits_in_a_thread": exits_in_a_thread,
    "interrupts_in_a_thread": interrupts_in_a_thread,
    "exits_on_the_loop": exits_on_the_loop,
    "fine": fine,
}


@pytest.mark.parametrize(
    ("function", "raised"),
    [
        ("exits_in_a_thread", "SystemExit(3)"),
        ("interrupts_in_a_thread", "KeyboardInterrupt()"),
        ("exits_on_the_loop", "SystemExit(0)"),
    ],
)
async def test_an_exit_in_a_node_fails_the_node_not_the_process(
    tmp_path: Path, function: str, raised: str
) -> None:
    retry = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)
    graph = linear_graph([function_node("a", function, retry=retry)])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        result = await (await rt.start(graph)).result()
        assert result.status == "failed"
        assert result.error is not None
        assert f"{raised} raised: a node or tool cannot end the process" in result.error
        state = await rt.get_state(result.run_id)
        assert state.total_retries == 1  # retried like any failure
        # The runtime goes on: another run completes.
        after = await (await rt.start(linear_graph(["fine"]))).result()
        assert after.status == "completed"
