"""Runs a few finished runs in a fresh interpreter and prints the cyclic garbage they left,
for test_run_lifecycle.py.

Usage: python -m tests.runtime.garbage_target [DB]
Prints one JSON list: the types (and frames' code names) of what the cyclic collector
would free after three runs ended, empty when reference counting freed everything. A fresh
interpreter holds no threads or tasks of other tests, so whatever it finds was made by
these runs.
"""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import anyio

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime


async def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs.get("x", 0) + 1}


GRAPH = GraphSpec(
    id="chain",
    nodes=[NodeSpec(id=f"n{i}", function="step") for i in range(4)],
    edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(3)],
    entry_node="n0",
)


def cyclic_garbage() -> list[str]:
    """What the cyclic collector would free now, by type (empty: nothing)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage})
        frames = {o.f_code.co_qualname for o in gc.garbage if hasattr(o, "f_code")}
        return found + sorted(f"frame {name}" for name in frames)  # where a cycle was made
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def main(store: str | None) -> list[str]:
    async with Runtime(store, functions={"step": _step}) as rt:
        result = await (await rt.start(GRAPH, input={"x": 0})).result()  # warm up
        assert result.memory["x"] == 4, result
        await anyio.wait_all_tasks_blocked()
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                result = await (await rt.start(GRAPH, input={"x": 0})).result()
                assert result.status == "completed" and result.memory["x"] == 4, result
            await anyio.wait_all_tasks_blocked()  # let the actors' tasks end
            return cyclic_garbage()
        finally:
            gc.enable()


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)))
