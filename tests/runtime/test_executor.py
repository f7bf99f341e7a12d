from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import SqliteEventStore
from runtime._errors import RunNotFoundError, RunStateError, SpecError
from runtime._runtime import Runtime
from runtime.engine._function_node import NodeContext
from runtime.events import (
    BranchesJoined,
    EdgeTaken,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunFinished,
    fold,
)
from runtime.providers._scripted import ScriptedProvider
from runtime.spec._model import EdgeSpec, Goal, GraphSpec, MemoryKey, NodeSpec, RetryPolicy

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002, jitter=0.0)


def fn(id: str, **kw: Any) -> NodeSpec:
    return NodeSpec(id=id, kind="function", function=kw.pop("function", id), **kw)


def edge(source: str, target: str, condition: str = "on_success", **kw: Any) -> EdgeSpec:
    return EdgeSpec(source=source, target=target, condition=condition, **kw)  # type: ignore[arg-type]


def graph(nodes: list[NodeSpec], edges: list[EdgeSpec], **kw: Any) -> GraphSpec:
    kw.setdefault("entry_node", nodes[0].id)
    kw.setdefault("retry", FAST)
    return GraphSpec(id="g", nodes=nodes, edges=edges, **kw)


def counter(calls: list[str], name: str, out: dict[str, Any] | None = None) -> Any:
    async def run(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append(name)
        return dict(out or {})

    return run


async def events_of(path: Path, run_id: str) -> list[Any]:
    async with SqliteEventStore(path) as store:
        return await store.read_all(run_id)


async def test_linear_run_completes_and_the_log_folds_to_the_result(tmp_path: Path) -> None:
    calls: list[str] = []
    functions = {n: counter(calls, n, {f"{n}_out": n.upper()}) for n in "abc"}
    g = graph(
        [fn(n, output_keys=[f"{n}_out"]) for n in "abc"],
        [edge("a", "b"), edge("b", "c")],
        terminal_nodes=["c"],
    )
    db = tmp_path / "run.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g, input={"topic": "x"})
        result = await handle.result()
        assert result.status == "completed"
        assert result.quality == "clean"
        assert result.path == ["a", "b", "c"]
        assert result.memory == {"topic": "x", "a_out": "A", "b_out": "B", "c_out": "C"}
        state = await rt.get_state(handle.run_id)
        assert state.memory == result.memory
        assert state.path == result.path
        assert state.status == "completed"
        assert rt.store is not None
        report = await rt.store.verify(handle.run_id)
        assert report.ok
    assert calls == ["a", "b", "c"]
    events = await events_of(db, handle.run_id)
    bodies = [e.body for e in events]
    # one append per step: each node start is committed with the previous completion
    assert [type(b).__name__ for b in bodies].count("NodeStarted") == 3
    assert isinstance(bodies[-1], RunFinished) and bodies[-1].quality == "clean"


async def test_time_travel_folds_a_prefix(tmp_path: Path) -> None:
    functions = {n: counter([], n, {"last": n}) for n in "ab"}
    g = graph([fn("a"), fn("b")], [edge("a", "b")])
    async with Runtime(tmp_path / "t.db", functions=functions) as rt:
        handle = await rt.start(g)
        await handle.result()
        events = await rt.read_events(handle.run_id)
        after_a = next(e.seq for e in events if isinstance(e.body, NodeCompleted))
        state = await rt.get_state(handle.run_id, at_seq=after_a)
        assert state.memory == {"last": "a"}
        assert state.path == ["a"]
        assert (await rt.get_state(handle.run_id)).memory == {"last": "b"}


async def test_time_travel_before_the_first_event_is_a_value_error(tmp_path: Path) -> None:
    # Not RunNotFoundError: the run exists, the seq is what is wrong.
    async with Runtime(tmp_path / "t.db", functions={"a": counter([], "a")}) as rt:
        handle = await rt.start(graph([fn("a")], []))
        await handle.result()
        for at in (0, -1):
            with pytest.raises(ValueError, match=f"at_seq must be 1 or more.*got {at}"):
                await rt.get_state(handle.run_id, at_seq=at)
        # Nor the state "after" an event the log does not hold: not the last state quietly.
        last = (await rt.get_state(handle.run_id)).last_seq
        assert (await rt.get_state(handle.run_id, at_seq=last)).last_seq == last
        with pytest.raises(ValueError, match=rf"at_seq {last + 1} is past .* \(seq {last}\)"):
            await rt.get_state(handle.run_id, at_seq=last + 1)


async def test_a_failed_node_s_error_names_the_exception_type(tmp_path: Path) -> None:
    def missing(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"x": inputs["name"]}

    def bare(inputs: dict[str, Any]) -> dict[str, Any]:
        raise ValueError

    g = graph([fn("a", retry=RetryPolicy(max_attempts=1))], [])
    async with Runtime(tmp_path / "t.db", functions={"a": missing}) as rt:
        result = await (await rt.start(g)).result()
    assert result.status == "failed" and result.error == "node 'a' failed: KeyError: 'name'"
    async with Runtime(tmp_path / "u.db", functions={"a": bare}) as rt:
        result = await (await rt.start(g)).result()
    assert result.error == "node 'a' failed: ValueError"


async def test_conditional_edges_first_match_in_declaration_order_wins() -> None:
    calls: list[str] = []
    functions = {
        "route": counter(calls, "route", {"confidence": 0.9, "category": "billing"}),
        **{n: counter(calls, n) for n in ("billing", "confident", "fallback")},
    }
    g = graph(
        [fn("route"), fn("billing"), fn("confident"), fn("fallback")],
        [
            edge("route", "billing", "conditional", expression="category in ['billing', 'x']"),
            edge("route", "confident", "conditional", expression="confidence >= 0.8"),
            edge("route", "fallback", "always"),
        ],
    )
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(g)).result()
    assert result.path == ["route", "billing"]
    assert calls == ["route", "billing"]


async def test_always_fires_only_when_no_conditional_matched() -> None:
    calls: list[str] = []
    functions = {n: counter(calls, n, {"score": 1}) for n in ("a", "high", "other")}
    g = graph(
        [fn("a"), fn("high"), fn("other")],
        [
            edge("a", "high", "conditional", expression="score > 5"),
            edge("a", "other", "always"),
        ],
    )
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(g)).result()
    assert result.path == ["a", "other"]


async def test_on_failure_edge_fires_after_retries_and_quality_is_degraded(
    tmp_path: Path,
) -> None:
    attempts: list[int] = []

    async def flaky(inputs: dict[str, Any]) -> dict[str, Any]:
        attempts.append(1)
        raise ValueError("upstream down")

    functions = {"work": flaky, "recover": counter([], "recover", {"recovered": True})}
    g = graph(
        [fn("work"), fn("recover")],
        [edge("work", "recover", "on_failure")],
    )
    db = tmp_path / "f.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g)
        result = await handle.result()
    assert len(attempts) == 3
    assert result.status == "completed"
    assert result.quality == "degraded"
    assert result.total_retries == 2
    assert result.path == ["work", "recover"]
    failures = [
        e.body for e in await events_of(db, handle.run_id) if isinstance(e.body, NodeFailed)
    ]
    assert [(f.attempt, f.will_retry) for f in failures] == [(1, True), (2, True), (3, False)]
    assert failures[0].error == "upstream down" and failures[0].error_type == "ValueError"
    finished = (await events_of(db, handle.run_id))[-1].body
    assert isinstance(finished, RunFinished)
    assert (finished.quality, finished.total_retries) == ("degraded", 2)


async def test_retry_that_succeeds_stays_clean_and_counts_retries_once() -> None:
    attempts: list[int] = []

    async def twice_then_ok(inputs: dict[str, Any]) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("transient")
        return {"ok": True}

    g = graph([fn("n")], [])
    async with Runtime(None, functions={"n": twice_then_ok}) as rt:
        result = await (await rt.start(g)).result()
    assert (result.status, result.quality, result.total_retries) == ("completed", "clean", 2)
    assert len(attempts) == 3


async def test_failure_without_a_failure_edge_fails_the_run() -> None:
    async def broken(inputs: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("nope")

    g = graph([fn("a"), fn("b")], [edge("a", "b")], retry=RetryPolicy(max_attempts=1))
    async with Runtime(None, functions={"a": broken, "b": counter([], "b")}) as rt:
        result = await (await rt.start(g)).result()
    assert (result.status, result.quality) == ("failed", "failed")
    assert result.path == ["a"]
    assert "nope" in (result.error or "")


async def test_llm_decide_edge_routes_by_the_model_and_falls_back() -> None:
    nodes = [fn("triage"), fn("refund"), fn("escalate")]
    edges = [
        edge("triage", "refund", "llm_decide", fallback="escalate"),
        edge("triage", "escalate", "llm_decide", fallback="escalate"),
    ]
    functions = {n: counter([], n, {"said": n}) for n in ("triage", "refund", "escalate")}
    g = graph(nodes, edges, goal=Goal(description="resolve the ticket"))
    good = ScriptedProvider(['{"target": "refund", "reasoning": "customer wants money"}'])
    unknown = ScriptedProvider(['{"target": "nowhere"}'])
    async with Runtime(None, functions=functions, provider=good) as rt:
        result = await (await rt.start(g)).result()
        assert result.path == ["triage", "refund"]
        state = await rt.get_state(result.run_id)
        assert state.status == "completed"
        events = await rt.read_events(result.run_id)
        taken = [e.body for e in events if isinstance(e.body, EdgeTaken)]
        assert taken[0].reason == "customer wants money"
        prompt = good.requests_for("route")[0].messages[0].content
        assert "resolve the ticket" in prompt and "refund" in prompt
    async with Runtime(None, functions=functions, provider=unknown) as rt:
        result = await (await rt.start(g)).result()
        assert result.path == ["triage", "escalate"]


async def test_fan_out_runs_branches_concurrently_and_joins_once() -> None:
    both_running = anyio.Event()
    seen: list[str] = []

    def branch(name: str) -> Any:
        async def run(inputs: dict[str, Any]) -> dict[str, Any]:
            seen.append(name)
            if len(seen) == 2:
                both_running.set()
            with anyio.fail_after(5):
                await both_running.wait()  # deadlocks unless both branches run at once
            return {name: True}

        return run

    joins: list[dict[str, Any]] = []

    async def join(inputs: dict[str, Any]) -> dict[str, Any]:
        joins.append(dict(inputs))
        return {}

    g = graph(
        [fn("start"), fn("left"), fn("right"), fn("join")],
        [
            edge("start", "left"),
            edge("start", "right"),
            edge("left", "join"),
            edge("right", "join"),
        ],
    )
    functions = {
        "start": counter([], "start"),
        "left": branch("left"),
        "right": branch("right"),
        "join": join,
    }
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(g)).result()
        events = await rt.read_events(result.run_id)
    assert result.status == "completed"
    assert len(joins) == 1 and joins[0]["left"] and joins[0]["right"]
    assert result.path[-1] == "join" and result.path.count("join") == 1
    joined = [e.body for e in events if isinstance(e.body, BranchesJoined)]
    assert len(joined) == 1 and sorted(joined[0].completed) == ["left", "right"]


async def test_two_branches_finishing_in_the_same_tick_join_exactly_once() -> None:
    joins: list[int] = []

    async def join(inputs: dict[str, Any]) -> None:
        joins.append(1)

    g = graph(
        [fn("s"), fn("a"), fn("b"), fn("c"), fn("j")],
        [edge("s", t) for t in "abc"] + [edge(t, "j") for t in "abc"],
    )
    functions = {**{n: counter([], n, {n: 1}) for n in "sabc"}, "j": join}
    async with Runtime(None, functions=functions) as rt:
        for _ in range(20):
            result = await (await rt.start(g)).result()
            assert result.status == "completed"
    assert len(joins) == 20


def _fan_graph(policy: str, conflict: str = "last_wins") -> GraphSpec:
    return graph(
        [fn("s"), fn("fast"), fn("slow"), fn("j")],
        [edge("s", "fast"), edge("s", "slow"), edge("fast", "j"), edge("slow", "j")],
        fan_out_policy=policy,
        conflict_strategy=conflict,
        retry=RetryPolicy(max_attempts=1),
    )


async def test_fail_all_cancels_the_other_branches_at_once() -> None:
    finished: list[str] = []

    async def fail(inputs: dict[str, Any]) -> None:
        raise RuntimeError("branch broke")

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(30)
        finished.append("slow")
        return {}

    functions = {"s": counter([], "s"), "fast": fail, "slow": slow, "j": counter([], "j")}
    async with Runtime(None, functions=functions) as rt:
        with anyio.fail_after(10):
            result = await (await rt.start(_fan_graph("fail_all"))).result()
    assert result.status == "failed"
    assert finished == []
    assert "j" not in result.path


async def test_continue_others_joins_with_the_surviving_branches() -> None:
    async def fail(inputs: dict[str, Any]) -> None:
        raise RuntimeError("branch broke")

    functions = {
        "s": counter([], "s"),
        "fast": fail,
        "slow": counter([], "slow", {"v": 1}),
        "j": counter([], "j"),
    }
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(_fan_graph("continue_others"))).result()
    assert (result.status, result.quality) == ("completed", "degraded")
    assert result.path[-1] == "j" and result.memory["v"] == 1


async def test_wait_all_lets_every_branch_finish_then_fails() -> None:
    finished: list[str] = []

    async def fail(inputs: dict[str, Any]) -> None:
        raise RuntimeError("branch broke")

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(0.05)
        finished.append("slow")
        return {"v": 2}

    functions = {"s": counter([], "s"), "fast": fail, "slow": slow, "j": counter([], "j")}
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(_fan_graph("wait_all"))).result()
    assert result.status == "failed"
    assert finished == ["slow"]
    assert result.memory["v"] == 2  # the finished branch's work is recorded
    assert "j" not in result.path


@pytest.mark.parametrize(("strategy", "expected"), [("last_wins", "slow"), ("first_wins", "fast")])
async def test_memory_conflict_strategies_hold_through_the_join(
    strategy: str, expected: str
) -> None:
    async def fast(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"answer": "fast"}

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(0.05)
        return {"answer": "slow"}

    seen: list[Any] = []

    async def join(inputs: dict[str, Any]) -> None:
        seen.append(inputs["answer"])

    functions = {"s": counter([], "s"), "fast": fast, "slow": slow, "j": join}
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(_fan_graph("fail_all", strategy))).result()
        state = await rt.get_state(result.run_id)
    assert result.memory["answer"] == expected
    assert seen == [expected]  # the join node sees the same value: no undoing at the join
    assert state.memory["answer"] == expected


async def test_memory_conflict_strategy_error_fails_the_fan_out() -> None:
    async def write(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"answer": 1}

    functions = {"s": counter([], "s"), "fast": write, "slow": write, "j": counter([], "j")}
    async with Runtime(None, functions=functions) as rt:
        result = await (await rt.start(_fan_graph("continue_others", "error"))).result()
    # one branch wrote first; the other's conflicting write failed that branch
    assert result.quality == "degraded"
    assert result.memory["answer"] == 1


async def test_memory_reducers_record_only_the_change(tmp_path: Path) -> None:
    async def say(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"messages": f"hello {len(inputs.get('messages', []))}", "meta": {"n": 1}}

    g = graph(
        [fn("a", function="say"), fn("b", function="say")],
        [edge("a", "b")],
        memory=[
            MemoryKey(name="messages", reducer="append"),
            MemoryKey(name="meta", reducer="merge"),
        ],
    )
    db = tmp_path / "r.db"
    async with Runtime(db, functions={"say": say}) as rt:
        handle = await rt.start(g, input={"meta": {"origin": "test"}})
        result = await handle.result()
    assert result.memory["messages"] == ["hello 0", "hello 1"]
    assert result.memory["meta"] == {"origin": "test", "n": 1}
    writes = [
        e.body
        for e in await events_of(db, handle.run_id)
        if isinstance(e.body, MemoryWritten) and e.body.key == "messages"
    ]
    assert [(w.op, w.value) for w in writes] == [("append", "hello 0"), ("append", "hello 1")]


async def test_max_steps_bounds_a_self_loop() -> None:
    visits: list[int] = []

    async def loop(inputs: dict[str, Any]) -> dict[str, Any]:
        visits.append(1)
        return {"n": inputs.get("n", 0) + 1}

    g = graph(
        [fn("loop")],
        [edge("loop", "loop", "conditional", expression="n < 1000")],
        max_steps=7,
    )
    async with Runtime(None, functions={"loop": loop}) as rt:
        result = await (await rt.start(g)).result()
    assert result.status == "failed"
    assert "max_steps" in (result.error or "")
    assert len(visits) == 7 and result.steps == 7


async def test_hitl_pause_then_inject_and_resume_in_a_new_runtime(tmp_path: Path) -> None:
    approvals: list[Any] = []

    async def approve(inputs: dict[str, Any]) -> dict[str, Any]:
        approvals.append(inputs.get("approved"))
        return {"done": True}

    functions = {"draft": counter([], "draft", {"draft": "text"}), "approve": approve}
    g = graph([fn("draft"), fn("approve")], [edge("draft", "approve")], pause_nodes=["approve"])
    db = tmp_path / "p.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g)
        paused = await handle.result()
        assert paused.status == "paused" and paused.paused_reason == "hitl"
        assert paused.resume_at == ["approve"]
        assert approvals == []
        await rt.inject_input(handle.run_id, {"approved": "yes"})
        assert (await rt.get_state(handle.run_id)).memory["approved"] == "yes"
    async with Runtime(db, functions=functions) as rt2:  # a fresh runtime: only the log
        with pytest.raises(RunStateError, match="waits for approval"):
            await rt2.resume(handle.run_id)  # only an approval passes the gate
        approved = await rt2.approve(handle.run_id, by="ann")
        assert approved is not None
        result = await approved.result()
        assert result.status == "completed"
        assert result.path == ["draft", "approve"]
        assert approvals == ["yes"]
        with pytest.raises(RunStateError):
            await rt2.resume(handle.run_id)


async def test_user_pause_takes_effect_at_the_next_node_boundary(tmp_path: Path) -> None:
    entered = anyio.Event()
    release = anyio.Event()
    calls: list[str] = []

    async def first(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("first")
        entered.set()
        await release.wait()
        return {"first": 1}

    functions = {"first": first, "second": counter(calls, "second")}
    g = graph([fn("first"), fn("second")], [edge("first", "second")])
    db = tmp_path / "u.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g)
        await entered.wait()
        await rt.pause(handle.run_id)
        release.set()
        paused = await handle.result()
        assert (paused.status, paused.paused_reason, paused.resume_at) == (
            "paused",
            "user",
            ["second"],
        )
        assert paused.memory["first"] == 1  # the running node finished first
    async with Runtime(db, functions=functions) as rt2:
        result = await (await rt2.resume(handle.run_id)).result()
    assert result.status == "completed"
    assert calls == ["first", "second"]


async def test_cancel_stops_at_once_flushes_partial_outputs_and_resumes(tmp_path: Path) -> None:
    started = anyio.Event()
    runs: list[str] = []

    async def long(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        runs.append("long")
        await ctx.set_output("partial", "half done")
        started.set()
        await anyio.sleep(30 if len(runs) == 1 else 0)
        return {"partial": "all done"}

    functions = {"a": counter(runs, "a", {"a": 1}), "long": long}
    g = graph([fn("a"), fn("long")], [edge("a", "long")])
    db = tmp_path / "c.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g)
        await started.wait()
        with anyio.fail_after(5):
            await rt.cancel(handle.run_id, reason="user asked")
            cancelled = await handle.result()
        assert cancelled.status == "cancelled"
        assert cancelled.memory["partial"] == "half done"
        assert cancelled.resume_at == ["long"]
        state = await rt.get_state(handle.run_id)
        assert state.status == "cancelled" and state.memory["partial"] == "half done"
    async with Runtime(db, functions=functions) as rt2:
        result = await (await rt2.resume(handle.run_id)).result()
    assert result.status == "completed"
    assert result.memory["partial"] == "all done"
    assert runs == ["a", "long", "long"]  # the completed node did not run again


async def test_an_invalid_spec_never_starts_a_run(tmp_path: Path) -> None:
    g = graph([fn("a")], [edge("a", "ghost")])
    db = tmp_path / "bad.db"
    async with Runtime(db, functions={"a": counter([], "a")}) as rt:
        with pytest.raises(SpecError) as info:
            await rt.start(g, run_id="r1")
        assert "edges[0].target" in str(info.value)
        assert rt.store is not None
        assert await rt.store.list_runs() == []


async def test_unknown_function_is_a_clear_error_before_the_run() -> None:
    g = graph([fn("a", function="no.such.module:fn")], [])
    async with Runtime(None) as rt:
        with pytest.raises(SpecError, match=r"nodes\[0\]\.function"):
            await rt.start(g)


async def test_sync_durability_commits_each_node_start_before_it_runs(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    seen_in_log: list[bool] = []

    async def check(inputs: dict[str, Any], ctx: NodeContext) -> None:
        async with SqliteEventStore(db) as other:  # a second connection, like a reader
            events = await other.read_all(ctx.run_id)
        seen_in_log.append(
            any(isinstance(e.body, NodeStarted) and e.body.node_id == ctx.node_id for e in events)
        )

    g = graph([fn("a", function="check"), fn("b", function="check")], [edge("a", "b")])
    async with Runtime(db, functions={"check": check}) as rt:
        await (await rt.start(g)).result()
    assert seen_in_log == [True, True]


async def test_fold_of_the_log_equals_the_live_result_for_a_fan_out(tmp_path: Path) -> None:
    functions = {n: counter([], n, {n: n}) for n in "sabj"}
    g = graph(
        [fn("s"), fn("a"), fn("b"), fn("j")],
        [edge("s", "a"), edge("s", "b"), edge("a", "j"), edge("b", "j")],
    )
    db = tmp_path / "ff.db"
    async with Runtime(db, functions=functions) as rt:
        handle = await rt.start(g)
        result = await handle.result()
    state = fold(await events_of(db, handle.run_id))
    assert state.memory == result.memory
    assert sorted(state.path) == sorted(result.path)
    assert state.pending == []


async def test_async_durability_writes_behind_in_fewer_commits(tmp_path: Path) -> None:
    functions = {f"n{i}": counter([], f"n{i}", {f"k{i}": i}) for i in range(10)}
    nodes = [fn(f"n{i}") for i in range(10)]
    edges = [edge(f"n{i}", f"n{i + 1}") for i in range(9)]
    appends = {}
    for mode in ("sync", "async"):
        async with SqliteEventStore(tmp_path / f"{mode}.db") as store:
            async with Runtime(store, functions=functions) as rt:
                handle = await rt.start(graph(nodes, edges, durability=mode))
                result = await handle.result()
                assert result.status == "completed"
                state = await rt.get_state(handle.run_id)
                assert state.memory == result.memory and state.status == "completed"
            appends[mode] = store.statistics().appends
    assert appends["sync"] == 11  # one append per step, plus the last completion + RunFinished
    assert appends["async"] < appends["sync"]


async def test_resume_of_a_missing_run_is_a_clear_error(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "m.db") as rt:
        with pytest.raises(RunNotFoundError, match="ghost"):
            await rt.resume("ghost")
        with pytest.raises(RunNotFoundError):
            await rt.get_state("ghost")


async def test_a_fan_out_target_that_another_branch_reaches_runs_once_as_the_join() -> None:
    calls: list[str] = []
    functions = {n: counter(calls, n, {n: 1}) for n in "abc"}
    g = graph([fn("a"), fn("b"), fn("c")], [edge("a", "b"), edge("a", "c"), edge("b", "c")])
    async with Runtime(None, functions=functions) as rt:
        with anyio.fail_after(5):
            result = await (await rt.start(g)).result()
    assert result.status == "completed"
    assert calls == ["a", "b", "c"]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_pausing_a_finished_or_unknown_run_answers_alike_on_any_runtime(
    tmp_path: Path, store: str
) -> None:
    path = None if store == "memory" else tmp_path / "t.db"
    async with Runtime(path, functions={"a": counter([], "a")}) as rt:
        done = await (await rt.start(graph([fn("a")], []))).result()
        with pytest.raises(RunStateError, match="is completed: already completed: only a running"):
            await rt.pause(done.run_id)
        with pytest.raises(RunNotFoundError):
            await rt.pause("no-such-run")
