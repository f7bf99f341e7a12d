"""A run live in this process, for test_cross_process.py, which cancels it from another.

Usage: python -m tests.runtime.cancel_target DB RUN_ID
Runs a loop graph whose node sleeps a little each step, prints ``started`` once its first
step is committed, then the run's final status when its result comes.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime

STEPS = 2_000


async def tick(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(0.01)
    n = int(inputs.get("n", 0)) + 1
    if n == 3:
        print("started", flush=True)
    return {"n": n}


def graph() -> GraphSpec:
    return GraphSpec(
        id="ticker",
        nodes=[
            NodeSpec(id="tick", kind="function", function="tick"),
            NodeSpec(id="done", kind="function", function="tick"),
        ],
        edges=[
            EdgeSpec(
                source="tick", target="tick", condition="conditional", expression=f"n < {STEPS}"
            ),
            EdgeSpec(source="tick", target="done", condition="always"),
        ],
        entry_node="tick",
        max_steps=STEPS + 10,
    )


async def main(db: str, run_id: str) -> None:
    async with Runtime(db, functions={"tick": tick}) as rt:
        handle = await rt.start(graph(), run_id=run_id)
        result = await handle.result()
        print(f"status {result.status}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
