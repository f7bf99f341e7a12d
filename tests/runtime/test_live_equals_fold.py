"""One source of truth: a run's live result equals what the fold of its log gives.

Random graphs of function nodes (memory keys with every reducer, seeded with values of
every shape, fan-outs, flaky nodes that retry, failing nodes, pause points, a node that
is cancelled while it runs, resumes with and without input) run on a real SQLite file;
after every stretch of a run (start or resume, up to its stop) the result the live run
reported equals, field by field, the result read back from the log. Snapshots (of the
live state) are taken every few events, so the state each holds (an open fan-out's
included) is compared with the fold of the log up to it, and resumes start from them.
"""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runtime import (
    EdgeSpec,
    GraphSpec,
    MemoryKey,
    NodeContext,
    NodeSpec,
    RetryPolicy,
    RunResult,
    Runtime,
    SpecErrors,
    validate_graph,
)
from runtime._result import result_of
from runtime.engine import _runlog
from runtime.events import RunState, fold
from runtime.events._snapshots import decode_state

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0, jitter=0.0)
SEEDS = [None, "ab", 0, 7, ["x"], {"k": 1}, [["nested"]]]
KEYS = [
    MemoryKey(name="log", reducer="append"),
    MemoryKey(name="seeded", reducer="append"),
    MemoryKey(name="bag", reducer="merge"),
    MemoryKey(name="last", reducer="replace"),
]


class Behaviour:
    """What the nodes do: shared by every Runtime of one example (a resume is a new one)."""

    def __init__(self, flaky: set[str], failing: set[str], blocking: str | None) -> None:
        self.flaky = flaky
        self.failing = failing
        self.blocking = blocking
        self.entered = anyio.Event()
        self.blocked_once = False

    async def step(self, inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        node = ctx.node_id
        await ctx.set_output("last", f"{node}@{ctx.visit}")  # a partial output
        if node == self.blocking and not self.blocked_once:
            self.blocked_once = True
            self.entered.set()
            await anyio.sleep_forever()  # until the test cancels the run
        if node in self.failing:
            raise ValueError(f"{node} always fails")
        if node in self.flaky and ctx.attempt == 1 and ctx.visit % 2 == 1:
            raise RuntimeError(f"{node} fails its first attempt")
        seen = len(inputs.get("log") or [])
        out: dict[str, Any] = {
            "log": f"{node}:{ctx.visit}:{seen}",
            "bag": {node: ctx.visit},
            "last": node,
        }
        if zlib.crc32(node.encode()) % 2:
            out["seeded"] = [node, ctx.visit]
        if inputs.get("log") and zlib.crc32(f"{node}{ctx.visit}".encode()) % 3 == 0:
            out["copy"] = inputs["log"]  # passes a memory list on under another key
        return out


def build(
    size: int,
    extra: list[tuple[int, int, str]],
    pause: set[int],
    policy: str,
    strategy: str,
    max_steps: int,
) -> GraphSpec:
    nodes = [NodeSpec(id=f"n{i}", kind="function", function="step") for i in range(size)]
    edges = [EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(size - 1)]
    for s, t, condition in extra:
        # Several always / on_success edges out of one node fan out.
        edges.append(
            EdgeSpec(source=f"n{s % size}", target=f"n{t % size}", condition=condition)  # type: ignore[arg-type]
        )
    return GraphSpec(
        id="random",
        nodes=nodes,
        edges=edges,
        entry_node="n0",
        pause_nodes=sorted(f"n{i % size}" for i in pause if i % size),
        max_steps=max_steps,
        fan_out_policy=policy,  # type: ignore[arg-type]
        conflict_strategy=strategy,  # type: ignore[arg-type]
        memory=KEYS,
        retry=FAST,
    )


def _seq_only(state: RunState) -> RunState:
    return msgspec.structs.replace(state, last_hash="", last_position=0)


async def stretch(
    rt: Runtime, run_id: str | None, graph: GraphSpec, seed: Any, how: Any, behaviour: Behaviour
) -> tuple[str, RunResult]:
    if run_id is None:
        handle = await rt.start(graph, input={"seeded": seed, "n": 0})
    else:
        paused = (await rt.get_state(run_id)).paused
        if paused is not None and paused.reason == "hitl":  # only an approval passes a gate
            approved = await rt.approve(run_id, by="test", input=how)
            assert approved is not None
            handle = approved
        else:
            handle = await rt.resume(run_id, input=how)
    if behaviour.blocking is not None and not behaviour.entered.is_set():
        async with anyio.create_task_group() as tg:

            async def cancel_when_entered() -> None:
                await behaviour.entered.wait()
                await rt.cancel(handle.run_id, reason="stop")

            tg.start_soon(cancel_when_entered)
            live = await handle.result()
            tg.cancel_scope.cancel()
    else:
        live = await handle.result()
    return handle.run_id, live


@pytest.mark.timeout(300)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    size=st.integers(min_value=1, max_value=6),
    extra=st.lists(
        st.tuples(
            st.integers(0, 5),
            st.integers(0, 5),
            st.sampled_from(["always", "on_success", "on_failure"]),
        ),
        max_size=6,
    ),
    pause=st.sets(st.integers(0, 5), max_size=2),
    flaky=st.sets(st.integers(0, 5), max_size=3),
    failing=st.sets(st.integers(0, 5), max_size=1),
    blocking=st.one_of(st.none(), st.integers(0, 5)),
    policy=st.sampled_from(["fail_all", "continue_others", "wait_all"]),
    strategy=st.sampled_from(["last_wins", "first_wins", "error"]),
    seed=st.sampled_from(SEEDS),
    resume_input=st.lists(
        st.one_of(st.none(), st.fixed_dictionaries({"seeded": st.sampled_from(SEEDS)})),
        min_size=4,
        max_size=4,
    ),
    max_steps=st.integers(min_value=1, max_value=20),
)
async def test_the_live_result_equals_the_fold_of_the_log(
    size: int,
    extra: list[tuple[int, int, str]],
    pause: set[int],
    flaky: set[int],
    failing: set[int],
    blocking: int | None,
    policy: str,
    strategy: str,
    seed: Any,
    resume_input: list[dict[str, Any] | None],
    max_steps: int,
) -> None:
    graph = build(size, extra, pause, policy, strategy, max_steps)
    try:
        validate_graph(graph)
    except SpecErrors as refused:
        # A branch that surely fans out again is refused before it runs (see
        # test_nested_fanout.py): not a run, so nothing to compare. Any other refusal fails.
        assume(not all("fans out inside a branch" in e.reason for e in refused.errors))
        raise
    behaviour = Behaviour(
        {f"n{i % size}" for i in flaky},
        {f"n{i % size}" for i in failing},
        None if blocking is None else f"n{blocking % size}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        run_id: str | None = None
        for how in [None, *resume_input]:
            # A resume is a new Runtime on the same file, as after a restart.
            async with Runtime(path, functions={"step": behaviour.step}) as rt:
                assert rt.store is not None
                with (
                    mock.patch.object(_runlog, "SNAPSHOT_EVERY", 7),
                    anyio.fail_after(20),  # a guard against a hang, not a timing check
                ):
                    run_id, live = await stretch(rt, run_id, graph, seed, how, behaviour)
                events = await rt.read_events(run_id)
                read_back = await rt.result(run_id)
                snapshot = await rt.store.load_snapshot(run_id)
                through_snapshot = await rt.get_state(run_id)
            assert live == read_back
            assert live == result_of(fold(events))
            assert through_snapshot == fold(events)
            if snapshot is not None:
                # The state a snapshot holds (the live state when it was taken, open fan-out
                # and all, or a read's fold) is the fold of the log up to it; a live state
                # records the last seq only.
                held, folded = decode_state(snapshot.data), fold(events[: snapshot.seq])
                assert _seq_only(held) == _seq_only(folded)
            if live.status in ("completed", "failed"):
                break


async def test_append_to_a_value_that_is_not_a_list_makes_it_the_first_item(
    tmp_path: Path,
) -> None:
    def add(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"items": 1, "tags": "t"}

    graph = GraphSpec(
        id="seeded",
        nodes=[NodeSpec(id="a", kind="function", function="add")],
        entry_node="a",
        memory=[
            MemoryKey(name="items", reducer="append"),
            MemoryKey(name="tags", reducer="append"),
        ],
    )
    async with Runtime(tmp_path / "runs.db", functions={"add": add}) as rt:
        handle = await rt.start(graph, input={"items": "ab", "tags": ["x", "y"]})
        live = await handle.result()
        state = await rt.get_state(handle.run_id)
    assert live.memory == {"items": ["ab", 1], "tags": ["x", "y", "t"]}
    assert state.memory == live.memory


async def test_a_list_passed_on_under_another_key_keeps_its_value(tmp_path: Path) -> None:
    def grow(inputs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"log": len(inputs.get("log") or [])}
        if len(inputs.get("log") or []) == 2:
            out["copy"] = inputs["log"]  # the run's own list, handed on as a value
        return out

    nodes = [NodeSpec(id=f"n{i}", kind="function", function="grow") for i in range(4)]
    graph = GraphSpec(
        id="alias",
        nodes=nodes,
        edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(3)],
        entry_node="n0",
        memory=[MemoryKey(name="log", reducer="append")],
    )
    async with Runtime(tmp_path / "runs.db", functions={"grow": grow}) as rt:
        handle = await rt.start(graph)
        live = await handle.result()
        state = await rt.get_state(handle.run_id)
    assert live.memory == {"log": [0, 1, 2, 3], "copy": [0, 1]}
    assert state.memory == live.memory
