"""A process for the ownership tests (test_ownership_pg.py), on a real PostgreSQL store.

Usage: python -m tests.runtime.owned_worker URL PREFIX MODE [ARGS...]

The store's tables are in schema PREFIX_store; the side-effect table is PREFIX_side.side.

- ``start N``: start N runs of GRAPH, print "started" and their ids, wait for all results.
- ``worker CONCURRENCY LEASE [PAUSE]``: a worker (run_worker) until killed; each function
  node sleeps PAUSE seconds (0.05 by default).
- ``slow``: start one run whose LLM node's model call takes 30 s; print the run id, then
  the run's final status when its result arrives.

Every function node records its start and end in the table ``PREFIX_side.side`` (run,
node, event, pid), on its own connection: side effects that a test counts.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import anyio
import psycopg

from runtime import LlmProvider, LlmRequest, LlmResponse, OwnershipConfig, Runtime, run_worker
from runtime.engine._function_node import NodeContext
from runtime.spec._model import GraphSpec, NodeSpec
from runtime.testing import ScriptedProvider, linear_graph

NODES = [f"n{i}" for i in range(10)]


_connection: psycopg.Connection[tuple[object, ...]] | None = None
_lock = threading.Lock()


def _side(url: str, prefix: str, run_id: str, node: str, event: str) -> None:
    global _connection
    with _lock:  # one connection per process, used from worker threads in turn
        if _connection is None:
            _connection = psycopg.connect(url, autocommit=True)
        _connection.execute(
            f"INSERT INTO {prefix}_side.side VALUES (%s, %s, %s, %s)",
            (run_id, node, event, os.getpid()),
        )


def functions(url: str, prefix: str, pause: float = 0.05) -> dict[str, Any]:
    def make(node: str) -> Any:
        async def run(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
            await anyio.to_thread.run_sync(_side, url, prefix, ctx.run_id, node, "start")
            await anyio.sleep(pause)
            total = int(inputs.get("total", 0)) + int(inputs.get("seed", 0)) + NODES.index(node)
            await anyio.to_thread.run_sync(_side, url, prefix, ctx.run_id, node, "end")
            return {"total": total, node: f"{node}:{inputs.get('seed')}"}

        return run

    return {node: make(node) for node in NODES}


def graph() -> GraphSpec:
    return linear_graph(NODES, graph_id="owned")


class SlowModel:
    """A model whose every call takes 30 s (the scripted provider answers after that)."""

    name = "slow"

    def __init__(self) -> None:
        self.scripted = ScriptedProvider(lambda request: "done")

    async def complete(self, request: LlmRequest) -> LlmResponse:
        await anyio.sleep(30)
        return await self.scripted.complete(request)


def slow_graph() -> GraphSpec:
    return GraphSpec(
        id="slow",
        nodes=[NodeSpec(id="think", kind="llm", system_prompt="think")],
        edges=[],
        entry_node="think",
    )


async def main(url: str, prefix: str, mode: str, args: list[str]) -> None:
    store = f"{url}?schema={prefix}_store"
    if mode == "start":
        count = int(args[0])
        async with Runtime(
            store,
            functions=functions(url, prefix),
            ownership=OwnershipConfig(lease_seconds=2),
        ) as rt:
            handles = [await rt.start(graph(), input={"seed": i}) for i in range(count)]
            print("started", *[h.run_id for h in handles], flush=True)
            for handle in handles:
                await handle.result()
        print("finished", flush=True)
    elif mode == "worker":
        concurrency, lease = int(args[0]), float(args[1])
        pause = float(args[2]) if len(args) > 2 else 0.05

        def ready(runtime: Runtime) -> None:
            print("ready", flush=True)

        await run_worker(
            store,
            functions=functions(url, prefix, pause),
            concurrency=concurrency,
            lease_seconds=lease,
            poll_interval=0.1,
            on_ready=ready,
        )
    elif mode == "slow":
        provider: LlmProvider = SlowModel()
        async with Runtime(
            store, provider=provider, ownership=OwnershipConfig(lease_seconds=5)
        ) as rt:
            handle = await rt.start(slow_graph())
            print(handle.run_id, flush=True)
            result = await handle.result()
            print(result.status, flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
