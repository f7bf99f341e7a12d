"""A pause has one meaning from every process, on SQLite and PostgreSQL: it is recorded as
``run.pause_requested`` and the run's owner pauses at its next node boundary; the node
running then finishes and its outputs are kept, the pause is recorded once, and the log is
the same as an in-process pause's."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, NodeContext, OwnershipConfig, RunStateError, Runtime
from runtime.events import NodeStarted, PauseRequested, RunPaused
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="patient",
    nodes=[
        function_node("work", output_keys=["progress", "done"]),
        function_node("after", output_keys=["noted"]),
    ],
    edges=[EdgeSpec(source="work", target="after")],
    entry_node="work",
)

THREE = GraphSpec(
    id="patient3",
    nodes=[*GRAPH.nodes, function_node("last")],
    edges=[*GRAPH.edges, EdgeSpec(source="after", target="last")],
    entry_node="work",
)


class Work:
    """The ``work`` node: records a partial output, says it started, then works until a
    pause is asked for (``ctx.pause_requested``) and returns its outputs."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.calls = 0

    async def __call__(self, inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        self.calls += 1
        await ctx.set_output("progress", 1)
        self.started.set()
        with anyio.fail_after(30):
            while not ctx.pause_requested:  # noqa: ASYNC110 (the flag is what is tested)
                await anyio.sleep(0.01)
        return {"progress": 2, "done": True}

    def functions(self) -> dict[str, Any]:
        return {"work": self, "after": lambda inputs: {"noted": True}}


def _tags(events: list[Any]) -> list[str]:
    return [e.body.__struct_config__.tag for e in events]


async def _paused_by(pauser: Runtime, owner: Runtime, work: Work) -> tuple[str, list[Any]]:
    handle = await owner.start(GRAPH)
    await work.started.wait()
    await pauser.pause(handle.run_id)
    result = await handle.result()
    assert (result.status, result.paused_reason, result.resume_at) == ("paused", "user", ["after"])
    # The running node finished: its outputs are kept, nothing of the next node ran.
    assert result.memory == {"progress": 2, "done": True}
    return handle.run_id, await owner.read_events(handle.run_id)


async def test_a_pause_from_another_runtime_stops_at_the_next_node_boundary(store: str) -> None:
    work = Work()
    async with (
        Runtime(store, functions=work.functions()) as owner,
        Runtime(store) as other,  # cannot run the graph: it only asks
    ):
        run_id, events = await _paused_by(other, owner, work)
        state = await other.get_state(run_id)
        assert state.status == "paused" and not state.pause_requested
        requests = [e for e in events if isinstance(e.body, PauseRequested)]
        pauses = [e for e in events if isinstance(e.body, RunPaused)]
        assert len(requests) == 1 and len(pauses) == 1  # recorded once
        assert pauses[0].body == RunPaused(reason="user", node_id="after")
        # The request came while ``work`` ran; the pause after it completed.
        completed = next(e.seq for e in events if e.body.__struct_config__.tag == "node.completed")
        assert requests[0].seq < completed < pauses[0].seq
        # A paused run cannot be paused again, from either runtime.
        for rt in (owner, other):
            with pytest.raises(RunStateError, match="only a running run can pause"):
                await rt.pause(run_id)
        resumed = await (await owner.resume(run_id)).result()
        assert resumed.status == "completed" and resumed.memory["noted"] is True
        assert work.calls == 1  # the node was never interrupted nor run again
        log = await owner.read_events(run_id)
        starts = [e.body.node_id for e in log if isinstance(e.body, NodeStarted)]
        assert starts == ["work", "after"]
        assert owner.store is not None
        info = await owner.store.get_run(run_id)
        assert info is not None and info.owner is None  # no claim left behind


async def test_the_log_of_a_pause_is_the_same_from_any_process(store: str) -> None:
    work_here, work_there = Work(), Work()
    async with Runtime(store, functions=work_here.functions()) as owner:
        _, here = await _paused_by(owner, owner, work_here)
    async with (
        Runtime(store, functions=work_there.functions()) as owner,
        Runtime(store) as other,
    ):
        _, there = await _paused_by(other, owner, work_there)
    assert _tags(here) == _tags(there)
    assert "run.pause_requested" in _tags(here)


@pytest.mark.parametrize("via", ["set_output", "node_end"])
async def test_an_append_that_meets_the_request_takes_it_in(store: str, via: str) -> None:
    """The owner does not look at the store's heads (an hour's interval): its own next
    append meets the request, takes it in and goes on; the run pauses at the first node
    boundary after the request was committed, whichever append met it (the node's own,
    or the step that would start the next node: that start is held, never recorded)."""
    go, recorded = anyio.Event(), anyio.Event()
    calls: list[str] = []

    async def work(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls.append("work")
        await ctx.set_output("progress", 1)
        recorded.set()
        await go.wait()
        if via == "set_output":
            await ctx.set_output("progress", 2)  # meets the request
            assert ctx.pause_requested
        return {"progress": 3, "done": True}

    functions = {"work": work, "after": lambda inputs: {"noted": True}, "last": lambda i: {}}
    slow_watch = OwnershipConfig(control_interval=3600)
    async with (
        Runtime(store, functions=functions, ownership=slow_watch) as owner,
        Runtime(store) as other,
    ):
        handle = await owner.start(THREE)
        await recorded.wait()  # progress 1 is committed: the request comes after it
        await other.pause(handle.run_id)
        go.set()
        result = await handle.result()
        events = await owner.read_events(handle.run_id)
    tags = _tags(events)
    assert tags.count("run.pause_requested") == 1 and tags.count("run.paused") == 1
    assert result.status == "paused" and result.memory["done"] is True
    # Either way the next node never starts: the log is an in-process pause's.
    assert [e.body.node_id for e in events if isinstance(e.body, NodeStarted)] == ["work"]
    assert result.resume_at == ["after"] and result.paused_reason == "user"
    assert tags[-1] in ("run.paused", "snapshot.taken")
    assert tags.index("run.pause_requested") < tags.index("node.completed")
    assert calls == ["work"]
