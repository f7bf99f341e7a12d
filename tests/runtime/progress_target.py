"""A run live in this process whose node records partial outputs, then works on, for
test_cross_process.py, which cancels it from another process.

Usage: python -m tests.runtime.progress_target DB RUN_ID
Prints ``started`` once the node has recorded ``progress`` 1 to 4, then the run's final
status when its result comes.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from runtime import GraphSpec, NodeContext, NodeSpec, Runtime


async def work(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    for i in range(1, 5):
        await ctx.set_output("progress", i)
    print("started", flush=True)
    await anyio.sleep(3600)  # long work, cancelled from another process
    return {"progress": 100}


async def main(db: str, run_id: str) -> None:
    graph = GraphSpec(
        id="progress", nodes=[NodeSpec(id="work", function="work")], entry_node="work"
    )
    async with Runtime(db, functions={"work": work}) as rt:
        result = await (await rt.start(graph, run_id=run_id)).result()
        print(f"status {result.status}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
