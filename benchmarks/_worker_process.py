"""One worker process of ``python -m benchmarks workers`` (our side).

Usage: python -m benchmarks._worker_process URL SCHEMA WORKER_ID CONCURRENCY LEASE PAUSE [gate]

Runs :func:`runtime.run_worker` on the store in SCHEMA with the benchmark's functions
(``n0`` ... ``n9``; each sleeps PAUSE seconds, then adds its index to ``total``); prints
"ready" once it claims work, and runs until killed. With ``gate`` it first opens the store
once (imports and first-use set-up done), prints "loaded" and waits for a line on stdin
before it starts, so that several workers can be started at one instant.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from runtime import Runtime, run_worker
from runtime.testing import linear_graph

NODES = [f"n{i}" for i in range(10)]


def functions(pause: float) -> dict[str, Any]:
    def make(index: int) -> Any:
        async def step(inputs: dict[str, Any]) -> dict[str, Any]:
            if pause:
                await anyio.sleep(pause)
            return {"total": int(inputs.get("total", 0)) + index}

        return step

    return {node: make(i) for i, node in enumerate(NODES)}


def graph() -> Any:
    """The workload: 10 function nodes in a row, every step committed before the next."""
    return linear_graph(NODES, graph_id="bench-workers")


async def main(
    url: str, schema: str, worker_id: str, concurrency: int, lease: float, pause: float
) -> None:
    def ready(runtime: Runtime) -> None:
        print("ready", flush=True)

    await run_worker(
        f"{url}?schema={schema}",
        concurrency=concurrency,
        worker_id=worker_id,
        lease_seconds=lease,
        poll_interval=min(0.1, lease / 2),
        functions=functions(pause),
        on_ready=ready,
    )


async def warm(url: str, schema: str) -> None:
    """Open the store once and read from it: what a worker imports and sets up on first
    use (the PostgreSQL driver and pool, the engine) is loaded before the clock starts."""
    async with Runtime(f"{url}?schema={schema}", functions=functions(0.0)):
        pass


if __name__ == "__main__":
    url, schema, worker_id, concurrency, lease, pause = sys.argv[1:7]
    if sys.argv[7:] == ["gate"]:
        anyio.run(warm, url, schema)
        print("loaded", flush=True)
        sys.stdin.readline()
    anyio.run(main, url, schema, worker_id, int(concurrency), float(lease), float(pause))
