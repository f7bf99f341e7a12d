"""Replay along the paths a run can take besides a straight one: a stall that asks the
user and a resume in another process, retried and failed function nodes, function nodes
run again (``rerun_functions``), a fan-out's conflict strategy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import SqliteEventStore
from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmResponse,
    NodeSpec,
    RetryPolicy,
    Runtime,
    SpecErrors,
    Usage,
    tool,
)
from runtime.events import NodeStarted
from runtime.providers import ToolCall
from runtime.spec import BranchJudgeSpec, BranchSpec, ParallelSpec
from runtime.testing import ScriptedProvider, reply, tool_call

from .replay_graphs import FUNCTIONS, Failing, offline, record, trip

pytestmark = pytest.mark.anyio


@tool
def ask_calendar(day: str) -> str:
    """Read the calendar."""
    return "busy"


async def test_a_stall_that_asked_the_user_and_a_resume_elsewhere_replay_equal(
    tmp_path: Path,
) -> None:
    node = NodeSpec(
        id="n", kind="llm", tools=["ask_calendar"], output_keys=["slot"], client_facing=True
    )
    graph = GraphSpec(id="calendar", nodes=[node], entry_node="n")
    same = [
        reply("", ToolCall(id=f"c{i}", name="ask_calendar", arguments={"day": "mon"}))
        for i in range(3)
    ]
    db = tmp_path / "run.db"
    async with Runtime(db, provider=ScriptedProvider(same), tools=[ask_calendar]) as rt:
        handle = await rt.start(graph)
        assert (await handle.result()).paused_reason == "input"
        await rt.inject_input(handle.run_id, {"preferred_day": "tuesday"})
    second = ScriptedProvider([reply("", tool_call("set_output", key="slot", value="tue")), "ok"])
    async with Runtime(db, provider=second, tools=[ask_calendar]) as rt:
        assert (await (await rt.resume(handle.run_id)).result()).status == "completed"
    async with offline(db, Failing()) as rt:
        report = await rt.replay(handle.run_id)
        # Five turns of one visit, served across the pause; the stall decided again.
        assert report.equal, report.summary()
        assert report.model_calls == 5
        stricter = await rt.replay(
            handle.run_id,
            msgspec.structs.replace(graph, nodes=[msgspec.structs.replace(node, max_iterations=2)]),
        )
    # The second turn's RETRY is recorded either way; the bound then ends the node where
    # the recorded run went on to a third turn.
    first = stricter.divergences[0]
    assert first.kind == "llm.turn" and "at level max_iterations" in first.reason


def _flaky_graph(**retry: Any) -> GraphSpec:
    return GraphSpec(
        id="flaky",
        nodes=[
            NodeSpec(
                id="call",
                function="call",
                output_keys=["answer"],
                retry=RetryPolicy(initial_delay=0.001, max_delay=0.001, jitter=0.0, **retry),
            ),
            NodeSpec(id="fallback", function="done"),
        ],
        edges=[EdgeSpec(source="call", target="fallback", condition="on_failure")],
        entry_node="call",
    )


async def test_retries_and_failures_replay_equal_and_a_retry_policy_change_shows(
    tmp_path: Path,
) -> None:
    calls = 0

    def call(inputs: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError(f"refused #{calls}")
        return {"answer": 42}

    db = tmp_path / "run.db"
    async with Runtime(db, functions={"call": call, "done": FUNCTIONS["done"]}) as rt:
        result = await (await rt.start(_flaky_graph(max_attempts=3))).result()
    assert result.memory == {"answer": 42}
    async with offline(db, Failing()) as rt:
        same = await rt.replay(result.run_id)
        fewer = await rt.replay(result.run_id, _flaky_graph(max_attempts=2))
    assert same.equal, same.summary()
    first = fewer.divergences[0]
    # The second failure is now final: the fallback edge fires instead of a third attempt.
    assert first.kind == "node.failed"
    assert first.recorded is not None and first.recorded["will_retry"] is True
    assert first.now is not None and first.now["will_retry"] is False


async def test_rerun_functions_runs_todays_functions(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)

    def cheap(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"amount": 50}

    changed = {**FUNCTIONS, "book": cheap}
    async with Runtime(store, functions=changed) as rt:
        report = await rt.replay(run_id, trip(), rerun_functions=True)
    reasons = [d.reason for d in report.divergences]
    assert reasons[0] == "memory key `amount` is now written 50"
    assert "edge `amount > 100` now false" in reasons[1]
    # Without them registered, a graph naming them cannot be run again.
    async with Runtime(store) as rt:
        with pytest.raises(SpecErrors, match="book"):
            await rt.replay(run_id, trip(), rerun_functions=True)


def _race(strategy: str) -> GraphSpec:
    # Branch "a" writes k first (a1), then finishes last (a2 waits for branch "b");
    # branch "b" writes k after a1 did, and finishes first.
    return GraphSpec(
        id="race",
        nodes=[
            NodeSpec(id="s", function="noop"),
            NodeSpec(id="a1", function="a1"),
            NodeSpec(id="a2", function="a2"),
            NodeSpec(id="b1", function="b1"),
            NodeSpec(id="j", function="noop"),
        ],
        edges=[
            EdgeSpec(source="s", target="a1"),
            EdgeSpec(source="s", target="b1"),
            EdgeSpec(source="a1", target="a2"),
            EdgeSpec(source="a2", target="j"),
            EdgeSpec(source="b1", target="j"),
        ],
        entry_node="s",
        conflict_strategy=strategy,  # type: ignore[arg-type]
    )


async def test_branches_finish_in_their_recorded_order_and_a_conflict_strategy_change_shows(
    tmp_path: Path,
) -> None:
    a_wrote = anyio.Event()
    b_done = anyio.Event()

    async def a1(inputs: dict[str, Any]) -> dict[str, Any]:
        a_wrote.set()
        return {"k": "from a"}

    async def b1(inputs: dict[str, Any]) -> dict[str, Any]:
        await a_wrote.wait()
        b_done.set()
        return {"k": "from b"}

    async def a2(inputs: dict[str, Any]) -> dict[str, Any]:
        await b_done.wait()
        await anyio.sleep(0.01)
        return {}

    functions = {"noop": lambda inputs: {}, "a1": a1, "a2": a2, "b1": b1}
    db = tmp_path / "run.db"
    async with Runtime(db, functions=functions) as rt:
        result = await (await rt.start(_race("first_wins"))).result()
    assert result.memory["k"] == "from b"
    async with offline(db, Failing()) as rt:
        for _ in range(5):  # the order is the record's, not the scheduler's
            same = await rt.replay(result.run_id)
            assert same.equal, same.summary()
        changed = await rt.replay(result.run_id, _race("last_wins"))
    first = changed.divergences[0]
    assert first.kind == "memory.written" and first.recorded is None
    assert first.reason.startswith("memory key `k` is now written 'from a' by `a1`")


async def test_parallel_branches_and_their_judge_are_served_and_a_strategy_change_shows(
    tmp_path: Path,
) -> None:
    def answering(text: str, tokens: int, name: str) -> ScriptedProvider:
        return ScriptedProvider(
            [
                reply("", tool_call("set_output", key="answer", value=text)),
                LlmResponse(text=text, usage=Usage(output_tokens=tokens), model=name),
            ],
            name=name,
        )

    def graph(strategy: str) -> GraphSpec:
        parallel = ParallelSpec(
            branches=[BranchSpec(label=f"b{i}", provider=f"p{i}") for i in range(3)],
            strategy=strategy,
            judge=BranchJudgeSpec(provider="judge"),
        )
        node = NodeSpec(id="answer", kind="llm", output_keys=["answer"], parallel=parallel)
        return GraphSpec(id="parallel", entry_node="answer", nodes=[node])

    providers: dict[str, Any] = {
        f"p{i}": answering(text, tokens, f"m{i}")
        for i, (text, tokens) in enumerate([("Lyon", 5), ("Paris", 30), ("Nice", 20)])
    }
    providers["judge"] = ScriptedProvider(["Response 2 is the best."], name="judge")
    db = tmp_path / "run.db"
    async with Runtime(db, provider=ScriptedProvider([]), providers=providers) as rt:
        result = await (await rt.start(graph("llm_judge"))).result()
    assert result.memory["answer"] == "Paris"
    async with offline(db, Failing()) as rt:
        same = await rt.replay(result.run_id)
        fewest = await rt.replay(result.run_id, graph("fewest_tokens"))
    assert same.equal, same.summary()
    assert same.model_calls == 7  # two turns of each branch, the judge's answer
    # The judge is no longer asked: the fewest tokens pick the first branch instead.
    first = fewest.divergences[0]
    assert first.kind == "branches.judged"
    assert first.now is not None and first.now["type"] == "branches.selected"
    assert (first.now["strategy"], first.now["winner"]) == ("fewest_tokens", 0)


async def test_a_run_cancelled_midway_replays_up_to_where_its_record_ends(tmp_path: Path) -> None:
    started = anyio.Event()

    async def wait(inputs: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    graph = GraphSpec(
        id="cut",
        nodes=[NodeSpec(id="a", function="done"), NodeSpec(id="b", function="wait")],
        edges=[EdgeSpec(source="a", target="b")],
        entry_node="a",
    )
    db = tmp_path / "run.db"
    async with Runtime(db, functions={"done": FUNCTIONS["done"], "wait": wait}) as rt:
        handle = await rt.start(graph)
        await started.wait()
        await rt.cancel(handle.run_id)
        assert (await handle.result()).status == "cancelled"
    async with offline(db, Failing()) as rt:
        report = await rt.replay(handle.run_id)
    assert report.equal and report.stopped is None, report.summary()
    [warning] = report.warnings
    assert "ends at seq" in warning and "without finishing" in warning
    assert "function node `b` visit 1 attempt 1 has no recorded outcome" in warning


async def test_a_node_cut_by_a_cancel_and_started_again_on_resume_replays_as_one_execution(
    tmp_path: Path,
) -> None:
    """docs/replay.md: an interrupted run resumed is replayed as one execution. The node
    the cancel cut logs ``node.started`` twice (the same visit and attempt); the replay
    starts it once, and that is no divergence, for a function node and for an LLM node
    cut while its tool ran (its recorded turn is served, not asked again)."""
    held: list[str] = []  # each node holds (until cancelled) the first time only
    entered = anyio.Event()

    async def hold(node: str) -> None:
        if node not in held:
            held.append(node)
            entered.set()
            await anyio.sleep_forever()

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await hold("b")
        return {"n": 2}

    @tool
    async def look(city: str) -> str:
        """Look a city up."""
        await hold("c")
        return "sunny"

    graph = GraphSpec(
        id="cut",
        nodes=[
            NodeSpec(id="a", function="done"),
            NodeSpec(id="b", function="slow"),
            NodeSpec(id="c", kind="llm", tools=["look"], output_keys=["plan"]),
        ],
        edges=[EdgeSpec(source="a", target="b"), EdgeSpec(source="b", target="c")],
        entry_node="a",
    )
    model = ScriptedProvider(
        [
            reply("", tool_call("look", city="Lisbon")),
            reply("", tool_call("set_output", key="plan", value="go")),
            reply("done"),
        ]
    )
    db = tmp_path / "run.db"
    functions = {"done": FUNCTIONS["done"], "slow": slow}
    async with Runtime(db, provider=model, functions=functions, tools=[look]) as rt:
        handle = await rt.start(graph)
        for node in ("b", "c"):  # cut each node once; resumed, it finishes
            await entered.wait()
            entered = anyio.Event()
            await rt.cancel(handle.run_id, reason=f"cut {node}")
            assert (await handle.result()).status == "cancelled"
            handle = await rt.resume(handle.run_id)
        assert (await handle.result()).status == "completed"
    async with SqliteEventStore(db) as store:
        events = await store.read_all(handle.run_id)
    starts = [e.body.node_id for e in events if isinstance(e.body, NodeStarted)]
    assert starts == ["a", "b", "b", "c", "c"]
    async with offline(db, Failing()) as rt:
        report = await rt.replay(handle.run_id)
    assert report.equal and report.stopped is None, report.summary()
