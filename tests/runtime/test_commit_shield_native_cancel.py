"""A node's durable append (``ctx.set_output``) is committed whole, as its run's log and its
commit hooks see it, even when the node's task is cancelled natively while the commit is
under way: the node's own deadline cancels its attempt's task with ``Task.cancel``, which
goes through an anyio shield on asyncio.

Before, the cancellation left the append at once: the batch was committed by the store
all the same, but the commit hooks (and the metrics) never saw it, and the run log counted
it in flight for ever (a later rebase, after another process's pause request, would have
waited for it). The commit is held here, in the store's writer thread, until the node's
deadline has passed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import eventstore._core as core
from eventstore import EventBody
from eventstore._requests import AppendRequest
from runtime import NodeContext, Runtime
from runtime.events import NodeFailed, OutputSet
from runtime.spec import RetryPolicy
from runtime.testing import function_node, linear_graph

pytestmark = pytest.mark.anyio

TIMEOUT = 0.3  # the node's deadline, in seconds
HELD = 2.0  # how long the writer holds the output's commit, well past the deadline


async def slow(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    await ctx.set_output("partial", 1)  # its commit outlives the node's deadline
    return {"done": True}


async def test_an_append_cancelled_by_the_nodes_deadline_reaches_the_commit_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = threading.Event()
    commit = core.WriterCore.commit

    def held_commit(self: core.WriterCore, batch: Sequence[Any]) -> None:
        if any(type(r) is AppendRequest and "output.set" in r.tags for r in batch):
            released.wait(30)  # in the writer thread: the loop goes on meanwhile
        commit(self, batch)

    monkeypatch.setattr(core.WriterCore, "commit", held_commit)
    seen: list[list[str]] = []

    def hook(run_id: str, seq: int, events: Sequence[EventBody]) -> None:
        seen.append([type(e).__name__ for e in events])

    graph = linear_graph(
        [function_node("slow", timeout=TIMEOUT, retry=RetryPolicy(max_attempts=1))]
    )
    with anyio.fail_after(30):
        async with Runtime(tmp_path / "runs.db", functions={"slow": slow}, hooks=[hook]) as rt:
            handle = await rt.start(graph)
            await anyio.sleep(HELD)  # the deadline passes while the commit is held
            released.set()
            result = await handle.result()
            events = await rt.read_events(handle.run_id)
    assert result.status == "failed"
    failed = [e.body for e in events if isinstance(e.body, NodeFailed)]
    assert [f.error_type for f in failed] == ["NodeTimeoutError"]
    # The output's batch was committed, and its hooks saw it, before the node's failure.
    assert [e.body.key for e in events if isinstance(e.body, OutputSet)] == ["partial"]
    assert ["OutputSet"] in seen, seen
    assert seen.index(["OutputSet"]) < next(i for i, b in enumerate(seen) if "NodeFailed" in b)
