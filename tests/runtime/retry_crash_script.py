"""A run killed (SIGKILL) while a node waits out its retry backoff, for
test_retry_resume.py.

Usage: python -m tests.runtime.retry_crash_script DB RUN_ID SIDEFILE
Node ``f`` fails its first attempt in this process; its backoff is long, and the process
kills itself as soon as the failure (``will_retry``) is committed, so the run's log ends
in the backoff.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from eventstore import EventBody
from runtime import OwnershipConfig
from runtime._runtime import Runtime
from runtime.engine._function_node import NodeContext
from runtime.events import NodeFailed
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec, RetryPolicy

SIDEFILE = ""
#: Set in the process that is killed: only there does ``f``'s first attempt fail.
CRASHING = False


def record(line: str) -> None:
    with open(SIDEFILE, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


async def flaky(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    record(f"f {ctx.attempt}")
    if CRASHING and ctx.attempt == 1:
        raise RuntimeError("f fails on its first attempt")
    return {"f": ctx.attempt}


async def plain(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


FUNCTIONS = {"flaky": flaky, "plain": plain}


def build(delay: float) -> GraphSpec:
    return GraphSpec(
        id="retry-crash",
        nodes=[
            NodeSpec(id="a", function="plain"),
            NodeSpec(id="f", function="flaky"),
            NodeSpec(id="z", function="plain"),
        ],
        edges=[EdgeSpec(source="a", target="f"), EdgeSpec(source="f", target="z")],
        entry_node="a",
        terminal_nodes=["z"],
        retry=RetryPolicy(max_attempts=2, initial_delay=delay, max_delay=delay, jitter=0.0),
    )


def kill_in_backoff(run: str, last_seq: int, bodies: Sequence[EventBody]) -> None:
    if any(isinstance(b, NodeFailed) and b.will_retry for b in bodies):
        os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, run_id: str) -> None:
    async with Runtime(
        db,
        functions=FUNCTIONS,
        hooks=[kill_in_backoff],
        ownership=OwnershipConfig(lease_seconds=0.3),
    ) as rt:
        handle = await rt.start(build(3600.0), run_id=run_id)
        await handle.result()


if __name__ == "__main__":
    db, run_id, SIDEFILE = sys.argv[1:4]
    CRASHING = True
    anyio.run(main, db, run_id)
