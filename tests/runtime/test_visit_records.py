"""A parallel round and an ``llm_judge`` verifier resume from their node's visit in the run
state (``NodeVisit.branch_round``, ``NodeVisit.verifications``), never from a read of the
log: the records are the fold's, equal live and folded, survive a snapshot, and a round
or a verdict recorded before a cancel is reused by the resumed run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import EventBody, SqliteEventStore
from runtime import EdgeSpec, GraphSpec, NodeSpec, RetryPolicy, Runtime, ScriptedProvider, tool
from runtime.engine._runlog import RunLog
from runtime.events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchTurn,
    NodeFailed,
    RunState,
    VerificationRecorded,
    fold,
)
from runtime.events._snapshots import decode_state, encode_state, load_state
from runtime.llm._verdict import JudgeContext
from runtime.spec import BranchJudgeSpec, BranchSpec, LlmJudgeVerifier, ParallelSpec
from runtime.testing import reply, tool_call

from .snapshot_support import save_bound_snapshot

pytestmark = pytest.mark.anyio


# ------------------------------------------------------------------ helpers


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The log reads made while the test runs: the store's ``read`` (every read of events,
    ``read_all`` too, goes through it). A RunLog has no read of its own."""
    made: list[str] = []
    assert not hasattr(RunLog, "read_events") and not hasattr(RunLog, "read_state")
    for owner, name in [(SqliteEventStore, "read")]:
        original = getattr(owner, name)

        def counted(self: Any, *args: Any, _o: Any = original, _n: str = name, **kw: Any) -> Any:
            made.append(_n)
            return _o(self, *args, **kw)

        monkeypatch.setattr(owner, name, counted)
    return made


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> list[RunLog]:
    """Every RunLog made while the test runs: their ``state`` is the live state."""
    made: list[RunLog] = []
    original = RunLog.__init__

    def init(self: RunLog, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(RunLog, "__init__", init)
    return made


def same_state(live: RunState, folded: RunState) -> bool:
    """Whether the live state is the fold (a live state keeps only ``last_seq`` of the
    envelope fields)."""
    return msgspec.structs.replace(folded, last_hash="", last_position=0) == (
        msgspec.structs.replace(live, last_hash="", last_position=0)
    )


def answering(text: str, rounds: int = 1) -> ScriptedProvider:
    """A branch model: sets the output, then answers ``text``, once per round."""
    script: list[Any] = []
    for n in range(1, rounds + 1):
        answer = f"{text} {n}"
        script += [reply("", tool_call("set_output", key="answer", value=answer)), answer]
    return ScriptedProvider(script)


def parallel_graph(judge: str | None = None) -> GraphSpec:
    return GraphSpec(
        id="rounds",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                output_keys=["answer"],
                tools=["lookup"],
                judge=judge,
                parallel=ParallelSpec(
                    branches=[BranchSpec(provider=f"p{i}") for i in range(3)],
                    judge=BranchJudgeSpec(provider="judge"),
                ),
            )
        ],
    )


class RetryFirstAnswer:
    """A node judge: RETRY on the first round's answer (turn 2), ACCEPT after."""

    async def evaluate(self, context: JudgeContext) -> str:
        return "retry" if context.iteration <= 2 else "accept"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: capital of France"


def of(bodies: Sequence[EventBody], kind: type[Any]) -> list[Any]:
    return [b for b in bodies if isinstance(b, kind)]


# ------------------------------------------------------------------ parallel rounds


async def test_parallel_rounds_read_no_log_and_their_records_are_the_folds(
    tmp_path: Path, reads: list[str], logs: list[RunLog]
) -> None:
    providers = {f"p{i}": answering(c, rounds=2) for i, c in enumerate(["Lyon", "Paris", "Nice"])}
    judge = ScriptedProvider(["Response 1", "Response 2"])
    async with Runtime(
        tmp_path / "runs.db",
        provider=ScriptedProvider([]),
        providers={**providers, "judge": judge},
        tools=[lookup],
        judges={"retry_first": RetryFirstAnswer()},
    ) as rt:
        assert isinstance(rt.store, SqliteEventStore)
        result = await (await rt.start(parallel_graph("retry_first"))).result()
        assert reads == []  # neither round, nor anything else in the run, read the log
        events = await rt.read_events(result.run_id)

    bodies = [e.body for e in events]
    assert result.status == "completed" and result.memory["answer"] == "Paris 2"
    assert [(s.round, s.winner) for s in of(bodies, BranchesSelected)] == [(0, 0), (2, 1)]
    assert judge.calls == 2 and all(p.calls == 4 for p in providers.values())
    (log,) = logs
    assert same_state(log.state, fold(events))
    # The round in progress is the state's until the winner's turns end it.
    selected = next(i for i, b in enumerate(bodies) if isinstance(b, BranchesSelected))
    during = fold(events[: selected + 1]).visits["answer"].branch_round
    assert during is not None and during.round == 0
    assert len(during.turns) == 6 and len(during.results) == 3 and len(during.finished) == 3
    assert during.judged is not None and during.judged.text == "Response 1"
    assert during.selected is not None and during.selected.winner == 0
    assert fold(events).visits["answer"].branch_round is None


def blocked_round(entered: anyio.Event, finished: anyio.Event) -> tuple[Any, Any]:
    """A lookup tool that blocks (branch 2 calls it) and a hook that says when branches 0
    and 1 finished."""

    @tool(name="lookup")
    async def blocking(city: str) -> str:
        """Look a city up (never returns here)."""
        entered.set()
        await anyio.sleep_forever()
        return city

    ends: list[int] = []

    def hook(run_id: str, seq: int, bodies: Sequence[EventBody]) -> None:
        ends.extend(b.branch for b in bodies if isinstance(b, BranchFinished))
        if len(ends) >= 2:
            finished.set()

    return blocking, hook


@pytest.mark.parametrize("through", ["the log", "a snapshot"])
async def test_a_cancelled_round_resumes_from_its_records_without_asking_again(
    tmp_path: Path, reads: list[str], logs: list[RunLog], through: str
) -> None:
    db = tmp_path / "runs.db"
    entered, finished = anyio.Event(), anyio.Event()
    blocking, hook = blocked_round(entered, finished)
    first = {
        "p0": answering("Lyon"),
        "p1": answering("Paris"),
        "p2": ScriptedProvider([reply("", tool_call("lookup", city="Paris"))]),
        "judge": ScriptedProvider([]),
    }
    async with Runtime(
        db, provider=ScriptedProvider([]), providers=first, tools=[blocking], hooks=[hook]
    ) as rt:
        handle = await rt.start(parallel_graph())
        with anyio.fail_after(20):  # a guard against a hang, not a timing check
            await entered.wait()
            await finished.wait()
        await rt.cancel(handle.run_id, reason="stop")
        stopped = await handle.result()
        assert reads == []
        events = await rt.read_events(handle.run_id)
    assert stopped.status == "cancelled"
    (live,) = logs
    assert same_state(live.state, fold(events))
    held = live.state.visits["answer"].branch_round
    assert held is not None and held.round == 0 and held.selected is None
    assert sorted(f.branch for f in held.finished) == [0, 1]
    assert [(t.branch, len(t.tool_calls)) for t in held.turns if t.branch == 2] == [(2, 1)]

    if through == "a snapshot":
        async with SqliteEventStore(db) as store:
            await save_bound_snapshot(store, fold(events))
            loaded, tail, _snapshot = await load_state(store, events[0].run_id)
            logged = await store.read_all(events[0].run_id)
        assert tail == [] and same_state(loaded, fold(logged))  # the resume reads it

    reads.clear()
    done0, done1 = ScriptedProvider([]), ScriptedProvider([])  # any call: script exhausted
    branch2 = ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="Paris!")), "Paris!"]
    )
    judge = ScriptedProvider(["Response 3"])
    resumed_with = {"p0": done0, "p1": done1, "p2": branch2, "judge": judge}
    async with Runtime(
        db, provider=ScriptedProvider([]), providers=resumed_with, tools=[lookup]
    ) as rt:
        result = await (await rt.resume(handle.run_id)).result()
        # The resume's one read of the stored state; the round itself read nothing.
        assert reads == ["read"]
        events = await rt.read_events(handle.run_id)
    assert result.status == "completed" and result.memory["answer"] == "Paris!"
    assert done0.calls == done1.calls == 0 and judge.calls == 1
    # Branch 2's recorded turn was not sent again: its tool ran, then the model went on.
    assert branch2.calls == 2
    assert branch2.requests[0].messages[-2].tool_calls[0].name == "lookup"
    bodies = [e.body for e in events]
    assert [t.iteration for t in of(bodies, BranchTurn) if t.branch == 2] == [1, 2, 3]
    (selected,) = of(bodies, BranchesSelected)
    assert selected.winner == 2 and len(of(bodies, BranchesJudged)) == 1
    assert same_state(logs[-1].state, fold(events))


# ------------------------------------------------------------------ llm_judge verifiers


def produce(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"draft": "The kettle boils one litre in 95 seconds."}


def verifier_graph(**node: Any) -> GraphSpec:
    return GraphSpec(
        id="verify",
        entry_node="write",
        terminal_nodes=["check"],
        nodes=[
            NodeSpec(id="write", function="produce", output_keys=["draft"]),
            NodeSpec(
                id="check",
                kind="verifier",
                output_keys=["check_verification", "check_verification_passed"],
                verifier=LlmJudgeVerifier(
                    target_key="draft",
                    evaluation_criteria="Sourced.",
                    evaluator="critic",
                    throw_on_fail=True,
                ),
                **node,
            ),
        ],
        edges=[EdgeSpec(source="write", target="check")],
    )


async def test_a_retried_llm_judge_verifier_reads_no_log_and_keeps_each_attempt(
    tmp_path: Path, reads: list[str], logs: list[RunLog]
) -> None:
    critic = ScriptedProvider(['{"score": 0.2}', '{"score": 0.9}'], name="critic")
    retry = RetryPolicy(max_attempts=2, initial_delay=0, jitter=0)
    async with Runtime(
        tmp_path / "runs.db", functions={"produce": produce}, providers={"critic": critic}
    ) as rt:
        assert isinstance(rt.store, SqliteEventStore)
        result = await (await rt.start(verifier_graph(retry=retry))).result()
        assert reads == []
        events = await rt.read_events(result.run_id)

    bodies = [e.body for e in events]
    assert result.status == "completed" and result.memory["check_verification_passed"] is True
    assert [(f.attempt, f.will_retry) for f in of(bodies, NodeFailed)] == [(1, True)]
    assert critic.calls == 2
    (log,) = logs
    state = fold(events)
    assert same_state(log.state, state)
    kept = state.visits["check"].verifications
    assert {a: v.passed for a, v in kept.items()} == {1: False, 2: True}
    assert kept == {v.attempt: v for v in of(bodies, VerificationRecorded)}


def hold_after_verification(recorded: anyio.Event) -> Callable[..., Any]:
    """A hook that keeps the verifier from reporting once its result is committed."""

    async def hook(run_id: str, seq: int, bodies: Sequence[EventBody]) -> None:
        if any(isinstance(b, VerificationRecorded) for b in bodies):
            recorded.set()
            await anyio.sleep_forever()  # until the run is cancelled

    return hook


@pytest.mark.parametrize("through", ["the log", "a snapshot"])
async def test_a_cancelled_llm_judge_verifier_resumes_with_its_recorded_result(
    tmp_path: Path, reads: list[str], logs: list[RunLog], through: str
) -> None:
    db = tmp_path / "runs.db"
    recorded = anyio.Event()
    critic = ScriptedProvider(['{"score": 0.95, "reasoning": "sourced"}'], name="critic")
    async with Runtime(
        db,
        functions={"produce": produce},
        providers={"critic": critic},
        hooks=[hold_after_verification(recorded)],
    ) as rt:
        handle = await rt.start(verifier_graph())
        with anyio.fail_after(20):  # a guard against a hang, not a timing check
            await recorded.wait()
        await rt.cancel(handle.run_id, reason="stop")
        stopped = await handle.result()
        assert reads == []
        events = await rt.read_events(handle.run_id)
    assert stopped.status == "cancelled" and critic.calls == 1
    state = fold(events)
    assert same_state(logs[0].state, state)
    assert list(state.visits["check"].verifications) == [1]

    if through == "a snapshot":
        async with SqliteEventStore(db) as store:
            await save_bound_snapshot(store, state)

    reads.clear()
    silent = ScriptedProvider([], name="critic")  # any call would be "script exhausted"
    async with Runtime(db, functions={"produce": produce}, providers={"critic": silent}) as rt:
        result = await (await rt.resume(handle.run_id)).result()
        assert reads == ["read"]
        events = await rt.read_events(handle.run_id)
    assert silent.calls == 0
    assert result.status == "completed" and result.memory["check_verification"]["score"] == 0.95
    assert len(of([e.body for e in events], VerificationRecorded)) == 1


# ------------------------------------------------------------------ snapshots


def states_with_records(events: Sequence[Any]) -> Iterator[RunState]:
    for n in range(1, len(events) + 1):
        yield fold(events[:n])


async def test_the_records_survive_a_snapshot_round_trip(tmp_path: Path) -> None:
    providers = {f"p{i}": answering(c) for i, c in enumerate(["Lyon", "Paris", "Nice"])}
    critic = ScriptedProvider(['{"score": 0.3}', '{"score": 0.9}'], name="critic")
    async with Runtime(
        tmp_path / "runs.db",
        provider=ScriptedProvider([]),
        providers={**providers, "judge": ScriptedProvider(["Response 2"]), "critic": critic},
        tools=[lookup],
        functions={"produce": produce},
    ) as rt:
        parallel = await (await rt.start(parallel_graph())).result()
        retry = RetryPolicy(max_attempts=2, initial_delay=0, jitter=0)
        verified = await (await rt.start(verifier_graph(retry=retry))).result()
        rounds = await rt.read_events(parallel.run_id)
        checks = await rt.read_events(verified.run_id)

    seen_round = seen_verdicts = False
    for state in [*states_with_records(rounds), *states_with_records(checks)]:
        back = decode_state(encode_state(state))
        assert back == state
        for visit in state.visits.values():
            held = visit.branch_round
            if held is not None and held.judged is not None and held.selected is not None:
                seen_round = True
                assert back.visits["answer"].branch_round == held
                assert any(r.output_key == "answer" for r in held.results)
            if len(visit.verifications) == 2:
                seen_verdicts = True
                assert back.visits["check"].verifications == visit.verifications
    assert seen_round and seen_verdicts
