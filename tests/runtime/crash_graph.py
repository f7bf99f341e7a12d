"""A graph run in a subprocess by test_crash.py, which kills it at chosen points.

Usage: python -m tests.runtime.crash_graph DB RUN_ID start|resume KILL SIDEFILE ACKFILE
KILL is "-" (no kill), "commit:N" (SIGKILL right after the N-th commit of this process,
i.e. between an append and the next step) or "node:ID" (SIGKILL in the middle of node ID).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from eventstore import EventBody, RunOwnedError
from runtime import OwnershipConfig
from runtime._runtime import Runtime
from runtime.engine._function_node import NodeContext
from runtime.spec._model import EdgeSpec, GraphSpec, MemoryKey, NodeSpec, RetryPolicy

NODES = ["a", "b", "c", "d", "e", "f", "g", "h"]
KILL = "-"
SIDEFILE = ""


def _record(line: str) -> None:
    with open(SIDEFILE, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def make(node: str) -> Any:
    async def run(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        _record(f"start {node} {ctx.attempt}")
        if KILL in (f"node:{node}", f"node:{node}{ctx.attempt}"):
            os.kill(os.getpid(), signal.SIGKILL)
        await anyio.sleep(0.001 if node != "c" else 0.003)
        if node == "f" and ctx.attempt == 1:
            raise RuntimeError("f fails on its first attempt")
        _record(f"end {node}")
        return {node: f"{node}-done", "trail": node} if node not in "cd" else {node: node * 2}

    return run


FUNCTIONS = {n: make(n) for n in NODES}


def build() -> GraphSpec:
    chain = [
        ("a", "b"),
        ("b", "c"),
        ("b", "d"),
        ("c", "e"),
        ("d", "e"),
        ("e", "f"),
        ("f", "g"),
        ("g", "h"),
    ]
    return GraphSpec(
        id="crash",
        nodes=[NodeSpec(id=n, function=n) for n in NODES],
        edges=[EdgeSpec(source=s, target=t) for s, t in chain],
        entry_node="a",
        terminal_nodes=["h"],
        memory=[MemoryKey(name="trail", reducer="append")],
        retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002, jitter=0.0),
    )


async def main(db: str, run_id: str, mode: str, ackfile: str) -> None:
    commits = 0

    def hook(run: str, last_seq: int, bodies: Sequence[EventBody]) -> None:
        nonlocal commits
        commits += 1
        with open(ackfile, "a") as f:  # what the runtime acknowledged as written
            f.write(f"{last_seq}\n")
            f.flush()
            os.fsync(f.fileno())
        if KILL == f"commit:{commits}":
            os.kill(os.getpid(), signal.SIGKILL)

    # A short lease: the killed process's claim expires soon after it died.
    async with Runtime(
        db, functions=FUNCTIONS, hooks=[hook], ownership=OwnershipConfig(lease_seconds=0.3)
    ) as rt:
        if mode == "start":
            handle = await rt.start(build(), input={"seed": 1}, run_id=run_id)
        else:
            while True:
                try:
                    handle = await rt.resume(run_id)
                    break
                except RunOwnedError:  # the killed owner's lease has not expired yet
                    await anyio.sleep(0.05)
        result = await handle.result()
        print(result.status)


if __name__ == "__main__":
    db, run_id, mode, KILL, SIDEFILE, ack = sys.argv[1:7]
    _record(f"--- process {mode} kill={KILL}")
    anyio.run(main, db, run_id, mode, ack)
