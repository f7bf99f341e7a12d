"""A process whose event loop stalls past its lease, for test_lease_commits.py.

Usage: python -m tests.runtime.stalling_owner DB LEASE

Starts one run of GRAPH on the SQLite store DB with a lease of LEASE seconds, prints its
id, then "stalling" when its node ``stall`` blocks the event loop (a blocking sleep of
three leases: the store's writer thread goes on meanwhile), and at the end the run's
outcome: its status, or the name of the error its result raised.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio

from runtime import OwnershipConfig, Runtime
from runtime.testing import linear_graph

NODES = ["n0", "stall", "n1", "n2"]


def graph() -> Any:
    return linear_graph(NODES, graph_id="stalling", durability="sync")


async def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"by": "stalled process"}


async def main(path: str, lease: float) -> None:
    async def stall(inputs: dict[str, Any]) -> dict[str, Any]:
        print("stalling", flush=True)
        time.sleep(lease * 3)  # noqa: ASYNC251  (the stall itself: the loop is blocked)
        return {"by": "stalled process"}

    functions = {"n0": _step, "stall": stall, "n1": _step, "n2": _step}
    ownership = OwnershipConfig(lease_seconds=lease, worker_id="stalling")
    async with Runtime(path, functions=functions, ownership=ownership) as rt:
        handle = await rt.start(graph())
        print(handle.run_id, flush=True)
        try:
            result = await handle.result()
            print(result.status, flush=True)
        except Exception as exc:
            print(type(exc).__name__, flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], float(sys.argv[2]))
