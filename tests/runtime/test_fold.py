"""The projection: fold laws (hypothesis) and the meaning of each event."""

from __future__ import annotations

import copy

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import Event, EventBody
from runtime.events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
    ConversationCompacted,
    ConversationEntry,
    EdgeTaken,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    PauseInfo,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    RunState,
    StallDetected,
    StallEntry,
    ToolCallRecord,
    ToolResult,
    Verdict,
    VerdictEntry,
    VerdictRecord,
    VerificationRecorded,
    fold,
)
from runtime.events._new_state import new_state
from runtime.events._node_visit import NO_INJECTED, NO_VERIFICATIONS
from runtime.events._shared_empty import NO_ENTRIES, NO_ITEMS
from runtime.events._snapshots import decode_state, encode_state
from runtime.events._state import apply
from runtime.events._verdicts import KEPT_PER_NODE

from ..eventstore.strategies import as_log, logs


def snapshot(state: RunState) -> bytes:
    return msgspec.json.encode(state)


@settings(max_examples=150, deadline=None)
@given(logs, st.lists(st.integers(0, 40), max_size=5))
def test_folding_in_chunks_equals_folding_at_once(log: list[Event], cuts: list[int]) -> None:
    bounds = sorted({min(c, len(log)) for c in cuts})
    state = None
    start = 0
    for end in [*bounds, len(log)]:
        state = fold(log[start:end], state)
        start = end
    assert state == fold(log)


def test_a_state_folded_on_keeps_every_field() -> None:
    # fold(rest, state) starts from a copy of state: a field the copy left out (a fork's
    # due gates) would be lost between chunks.
    log = as_log(
        "r",
        [
            RunStarted(graph={}, graph_hash="h", entry="a"),
            RunForked(source_run_id="s", source_seq=1, source_hash="x"),
        ],
    )
    chunked = fold(log[1:], fold(log[:1]))
    assert chunked.gates_due and fold(log[1:], fold(log[:1])) == fold(log)
    assert fold([], fold(log)) == fold(log)


@settings(max_examples=150, deadline=None)
@given(logs, st.integers(0, 40))
def test_fold_never_changes_the_state_it_is_given(log: list[Event], cut: int) -> None:
    prefix = fold(log[:cut])
    before = snapshot(prefix)
    fold(log[cut:], prefix)
    fold(log[cut:], prefix)
    assert snapshot(prefix) == before
    assert fold(log[:cut]) == prefix  # time travel: a prefix is the state as it was


@settings(max_examples=100, deadline=None)
@given(logs)
def test_fold_is_deterministic_and_leaves_events_alone(log: list[Event]) -> None:
    before = copy.deepcopy(log)
    assert fold(log) == fold(log)
    assert log == before


# Logs of a few nodes' visits with parallel rounds and verifier results: the events meet
# the visit they name often enough to fill NodeVisit.branch_round and .verifications.
_node = st.sampled_from(["a", "b"])
_visit = st.integers(1, 2)
_round = st.integers(0, 2)
_branch = st.integers(0, 2)
_short = st.text(max_size=3)
_started = st.builds(NodeStarted, node_id=_node, visit=_visit, attempt=st.integers(1, 2))
visit_logs = st.lists(
    st.one_of(
        _started,
        _started,
        st.builds(
            LlmTurn, node_id=_node, iteration=st.integers(0, 3), text=_short, tool_calls=st.just([])
        ),
        st.builds(
            BranchTurn,
            node_id=_node,
            visit=_visit,
            round=_round,
            branch=_branch,
            label=_short,
            iteration=st.integers(1, 3),
            text=_short,
            tool_calls=st.lists(
                st.builds(ToolCallRecord, id=_short, name=_short, arguments=st.just({})),
                max_size=1,
            ),
        ),
        st.builds(
            BranchToolResult,
            node_id=_node,
            visit=_visit,
            round=_round,
            branch=_branch,
            call_id=_short,
            name=_short,
            content=_short,
            output_key=st.none() | st.just("k"),
            output_value=st.none() | st.integers() | st.lists(st.integers(), max_size=2),
        ),
        st.builds(
            BranchFinished,
            node_id=_node,
            visit=_visit,
            round=_round,
            branch=_branch,
            label=_short,
            ok=st.booleans(),
        ),
        st.builds(BranchesJudged, node_id=_node, visit=_visit, round=_round, text=_short),
        st.builds(
            BranchesSelected,
            node_id=_node,
            visit=_visit,
            round=_round,
            strategy=_short,
            winner=_branch,
            label=_short,
        ),
        st.builds(
            VerificationRecorded,
            node_id=_node,
            visit=_visit,
            attempt=st.integers(1, 3),
            passed=st.booleans(),
            result=st.dictionaries(_short, st.integers(), max_size=2),
        ),
    ),
    min_size=4,
    max_size=30,
).map(lambda items: as_log("run-1", items))


@settings(max_examples=150, deadline=None)
@given(st.one_of(logs, visit_logs), st.integers(0, 30))
def test_visit_records_keep_the_fold_laws_and_read_back_from_snapshot_bytes(
    log: list[Event], cut: int
) -> None:
    prefix = fold(log[:cut])
    before = snapshot(prefix)
    whole = fold(log[cut:], prefix)
    assert snapshot(prefix) == before  # the prefix's rounds and results are not shared
    assert whole == fold(log)
    for state in (prefix, whole):
        assert decode_state(encode_state(state)) == state


def test_a_visit_keeps_its_round_in_progress_and_its_verifier_results() -> None:
    def turn(branch: int, *, round: int = 0, visit: int = 1) -> BranchTurn:
        return BranchTurn(
            node_id="a",
            visit=visit,
            round=round,
            branch=branch,
            label=f"b{branch}",
            iteration=1,
            text=f"answer {branch}",
            tool_calls=[],
        )

    def finished(branch: int) -> BranchFinished:
        return BranchFinished(node_id="a", visit=1, round=0, branch=branch, label="b", ok=True)

    def verified(attempt: int, *, visit: int = 1) -> VerificationRecorded:
        return VerificationRecorded(
            node_id="a", visit=visit, attempt=attempt, passed=attempt > 1, result={"n": attempt}
        )

    result = BranchToolResult(
        node_id="a", visit=1, round=0, branch=1, call_id="c", name="set_output", content="ok"
    )
    judged = BranchesJudged(node_id="a", visit=1, round=0, text="Response 2")
    selected = BranchesSelected(
        node_id="a", visit=1, round=0, strategy="llm_judge", winner=1, label="b1"
    )
    bodies: list[EventBody] = [
        START,
        NodeStarted(node_id="a", visit=1),
        turn(0),
        turn(1),
        finished(1),
        result,
        turn(0, visit=2),  # another visit's: not this one's
        finished(0),
        judged,
        selected,
        verified(1),
        verified(2),
        verified(3, visit=2),  # another visit's
        NodeStarted(node_id="a", visit=1, attempt=2),  # a rerun keeps both
        LlmTurn(node_id="a", iteration=1, text="answer 1", tool_calls=[]),  # ends round 0
        turn(1, round=1),
        NodeStarted(node_id="a", visit=2),  # a new visit starts with neither
    ]
    log = as_log("r", bodies)
    states = [fold(log[:n]) for n in range(len(log) + 1)]

    at_selection = states[bodies.index(selected) + 1].visits["a"].branch_round
    assert at_selection is not None and at_selection.round == 0
    assert at_selection.turns == [turn(0), turn(1)]
    assert at_selection.finished == [finished(1), finished(0)]  # in the order they ended
    assert at_selection.results == [result]
    assert (at_selection.judged, at_selection.selected) == (judged, selected)
    rerun = states[-4].visits["a"]
    assert rerun.branch_round == at_selection
    assert rerun.verifications == {1: verified(1), 2: verified(2)}
    assert states[-3].visits["a"].branch_round is None  # the winner's turn
    next_round = states[-2].visits["a"].branch_round
    assert (
        next_round is not None and next_round.round == 1 and next_round.turns == [turn(1, round=1)]
    )
    assert states[-2].visits["a"].verifications == {1: verified(1), 2: verified(2)}
    last = states[-1].visits["a"]
    assert (last.visit, last.branch_round, last.verifications) == (2, None, {})
    # Folding on from any prefix neither changes that prefix nor gives another state.
    for cut, prefix in enumerate(states):
        before = snapshot(prefix)
        assert fold(log[cut:], prefix) == states[-1]
        assert snapshot(prefix) == before and fold(log[:cut]) == prefix


def run(*bodies: EventBody) -> RunState:
    return fold(as_log("r", list(bodies)))


START = RunStarted(graph={"n": 1}, graph_hash="gh", entry="a", goal={"g": 1}, input={"q": "?"})


def test_run_started_seeds_memory_and_the_entry_point() -> None:
    state = run(START)
    assert state.status == "running" and state.run_id == "r"
    assert state.memory == {"q": "?"} and state.memory is not state.input
    assert state.pending == ["a"] and state.entry == "a" and state.goal == {"g": 1}
    assert (state.last_seq, state.last_hash, state.last_position) == (1, "h1", 10)


def test_memory_writes_apply_their_op() -> None:
    state = run(
        START,
        MemoryWritten(key="l", value=1, op="append"),
        MemoryWritten(key="l", value=2, op="append"),
        MemoryWritten(key="d", value={"a": 1}, op="merge"),
        MemoryWritten(key="d", value={"b": 2}, op="merge"),
        MemoryWritten(key="q", value="!", op="replace"),
        InputInjected(data={"extra": True}),
    )
    assert state.memory == {"q": "!", "l": [1, 2], "d": {"a": 1, "b": 2}, "extra": True}


def test_a_node_lifecycle_moves_it_through_pending_running_and_path() -> None:
    mid = run(START, NodeStarted(node_id="a", visit=1), OutputSet(node_id="a", key="o", value=3))
    assert mid.running == {"a": 1} and mid.pending == ["a"] and mid.outputs == {"a": {"o": 3}}
    done = fold(
        as_log(
            "r",
            [
                NodeCompleted(node_id="a"),
                EdgeTaken(source="a", target="b", edge_index=0, condition="always"),
            ],
        ),
        mid,
    )
    assert done.path == ["a"] and done.running == {} and done.outputs == {}
    assert done.pending == ["b"] and done.visit_counts == {"a": 1}


class _AuditedCompletion(NodeCompleted, frozen=True, gc=False, tag="test.audited_completed"):
    """An application's event that subclasses a catalogue event (with a tag of its own)."""

    auditor: str = ""


class _Unknown(EventBody, frozen=True, tag="test.unknown_to_apply"):
    node_id: str = "a"


def test_a_subclass_of_an_event_applies_as_its_base_and_counts_by_its_own_tag() -> None:
    # apply picks a body's case by its class (not isinstance per case): a subclass still
    # meets its base's case, and a body of another class only counts.
    state = run(
        START,
        NodeStarted(node_id="a", visit=1),
        _Unknown(),
        _AuditedCompletion(node_id="a", auditor="x"),
    )
    assert state.path == ["a"] and state.running == {} and state.visit_counts == {"a": 1}
    assert state.event_counts["test.audited_completed"] == 1
    assert state.event_counts["test.unknown_to_apply"] == 1
    assert "node.completed" not in state.event_counts


def test_failures_count_retries_and_final_failures() -> None:
    state = run(
        START,
        NodeStarted(node_id="a", visit=1),
        NodeFailed(node_id="a", error="boom", error_type="E", attempt=1, will_retry=True),
        NodeStarted(node_id="a", visit=1, attempt=2),
        NodeFailed(node_id="a", error="boom", error_type="E", attempt=2, will_retry=False),
    )
    assert state.total_retries == 1 and state.failed_nodes == ["a"] and state.path == ["a"]
    assert state.pending == [] and state.running == {}


def test_the_conversation_is_rebuilt_and_compacted() -> None:
    call = ToolCallRecord(id="c1", name="search", arguments={"q": "x"})
    state = run(
        START,
        NodeStarted(node_id="a", visit=1),
        MessageAdded(node_id="a", role="user", content="hi", kind="input"),
        LlmTurn(node_id="a", iteration=1, text="let me look", tool_calls=[call]),
        ToolResult(node_id="a", call_id="c1", name="search", content="found"),
        LlmTurn(node_id="a", iteration=2, text="done", tool_calls=[]),
        Verdict(node_id="a", iteration=2, action="accept", level="quality", feedback="ok"),
    )
    assert [(e.role, e.content) for e in state.conversation] == [
        ("user", "hi"),
        ("assistant", "let me look"),
        ("tool", "found"),
        ("assistant", "done"),
    ]
    assert state.conversation[1].tool_calls == [call]
    assert state.conversation[2].tool_call_id == "c1"
    assert state.iterations == {"a": 2}
    assert state.verdicts == {
        "a": VerdictRecord(iteration=2, action="accept", level="quality", feedback="ok")
    }
    compacted = fold(
        as_log("r", [ConversationCompacted(node_id="a", upto=3, summary="earlier: looked")]),
        state,
    )
    assert compacted.conversation.entries == [
        ConversationEntry(role="system", content="earlier: looked", node_id="a", kind="summary"),
        state.conversation[3],
    ]


def test_isolated_compaction_counts_the_nodes_own_visit_as_the_node_does() -> None:
    from runtime.llm._history import rebuild

    def said(node: str, text: str) -> MessageAdded:
        return MessageAdded(node_id=node, role="user", content=text, kind="input")

    bodies: list[EventBody] = [
        RunStarted(graph={"conversation_mode": "isolated"}, graph_hash="g", entry="a"),
        NodeStarted(node_id="a", visit=1),
        said("a", "a1"),
        said("a", "a2"),
        NodeCompleted(node_id="a"),
        NodeStarted(node_id="b", visit=1),
        said("b", "b1"),
        said("b", "b2"),
        said("b", "b3"),
        ConversationCompacted(node_id="b", upto=2, summary="b said two things"),
        said("b", "b4"),
    ]
    log = as_log("r", bodies)
    state = fold(log)
    # a's entries are untouched (a continuous-mode reading would have eaten them)...
    assert [(e.kind, e.content) for e in state.conversation] == [
        ("input", "a1"),
        ("input", "a2"),
        ("summary", "b said two things"),
        ("input", "b3"),
        ("input", "b4"),
    ]
    # ...and b's part is exactly what the LLM node rebuilds for its own visit.
    # (the fold and the node share one projection: the node's scope is the fold's)
    assert state.conversation.scope("b") == rebuild(log, "b").entries
    # Chunked folds agree across the compaction.
    assert fold(log[9:], fold(log[:9])) == state


def test_pause_resume_cancel_and_finish_set_the_status() -> None:
    paused = run(START, RunPaused(reason="hitl", node_id="a"))
    assert paused.status == "paused" and paused.paused == PauseInfo(reason="hitl", node_id="a")
    resumed = fold(as_log("r", [RunResumed()]), paused)
    assert resumed.status == "running" and resumed.paused is None
    cancelled = fold(as_log("r", [RunCancelled(node_id="a", reason="user")]), resumed)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at == "a"
    finished = run(
        START,
        RunFinished(
            status="completed", quality="degraded", total_retries=2, goal_outcome={"met": True}
        ),
    )
    assert finished.status == "completed" and finished.quality == "degraded"
    assert finished.pending == [] and finished.goal_outcome == {"met": True}
    assert finished.total_retries == 2


def test_an_empty_fold_is_a_new_run() -> None:
    assert fold([]) == RunState()
    assert fold([]).status == "new"


def test_a_state_keeps_each_nodes_newest_verdicts_and_stalls_and_counts_every_event() -> None:
    judged = [
        Verdict(node_id="a", iteration=i, action="retry", level="quality", feedback=f"f{i}")
        for i in range(KEPT_PER_NODE + 100)
    ]
    edges = [
        EdgeTaken(source="a", target="b", edge_index=0, condition="always"),
        EdgeTaken(source="b", target="a", edge_index=1, condition="always"),
        EdgeTaken(source="a", target="b", edge_index=0, condition="always"),
    ]
    stall = StallDetected(node_id="b", iteration=3, signature="[]")
    ruled = Verdict(node_id="b", iteration=4, action="accept", level="structural", confidence=1.0)
    log = as_log("r", [START, *judged, *edges, stall, ruled])
    state = fold(log)
    kept = state.verdict_history["a"]
    assert len(kept) == KEPT_PER_NODE  # the newest: the seqs of the 101st to the 600th
    assert [v.seq for v in kept] == list(range(102, 602))
    assert kept[-1] == VerdictEntry(
        seq=601, iteration=599, action="retry", level="quality", feedback="f599"
    )
    assert state.verdict_counts["a"] == {"retry": KEPT_PER_NODE + 100}
    assert state.verdict_history["b"] == [
        VerdictEntry(seq=606, iteration=4, action="accept", level="structural", confidence=1.0)
    ]
    assert state.stalls == {"b": [StallEntry(seq=605, iteration=3, signature="[]")]}
    assert list(state.edges_taken.items()) == [("a>b", 2), ("b>a", 1)]
    assert state.event_counts == {
        "run.started": 1,
        "judge.verdict": KEPT_PER_NODE + 101,
        "edge.taken": 3,
        "node.stalled": 1,
    }
    # Folded on from a prefix that had not dropped any yet, and through snapshot bytes.
    assert fold(log[300:], decode_state(encode_state(fold(log[:300])))) == state


def test_tool_turns_are_counted_apart_from_the_judged_verdicts() -> None:
    # A turn that called tools records a bail_out RETRY that nobody judged.
    tool = Verdict(node_id="a", iteration=1, action="retry", level="bail_out")
    judged = Verdict(node_id="a", iteration=2, action="retry", level="quality", feedback="f")
    accept = Verdict(node_id="a", iteration=4, action="accept", level="quality")
    log = as_log("r", [START, tool, judged, tool, accept])
    state = fold(log)
    assert state.verdict_counts == {"a": {"retry": 1, "accept": 1}}
    assert state.tool_turns == {"a": 2}
    assert [v.level for v in state.verdict_history["a"]] == [
        "bail_out", "quality", "bail_out", "quality"
    ]  # fmt: skip
    live = new_state("r")
    for event in log:
        apply(live, event.body, event.seq)
    assert (live.verdict_counts, live.tool_turns) == (state.verdict_counts, state.tool_turns)
    assert fold(log[3:], decode_state(encode_state(fold(log[:3])))) == state


@settings(max_examples=100, deadline=None)
@given(logs)
def test_a_live_state_s_shared_empty_lists_stay_empty(log: list[Event]) -> None:
    # A new live state's rarely filled lists are one shared empty list that apply
    # replaces, never changes in place: changed once, every later run would start with it.
    state = new_state("run-1")
    for event in log:
        apply(state, event.body, event.seq)
    assert new_state("run-2") == RunState(run_id="run-2")
    # The shared empty maps and lists (a new state's, a new visit's) stay empty too.
    assert (NO_ITEMS, NO_ENTRIES, NO_INJECTED, NO_VERIFICATIONS) == ({}, [], {}, {})
    folded = fold(log)
    for name in RunState.__struct_fields__:
        if name not in ("run_id", "last_seq", "last_hash", "last_position"):
            assert getattr(state, name) == getattr(folded, name)


_writes = st.builds(
    MemoryWritten,
    key=st.sampled_from(["k", "j"]),
    value=st.integers(0, 3),
    node_id=st.none() | _node,
    branch=st.none() | st.just("b"),
)
_visit_steps = st.lists(
    st.one_of(
        st.builds(
            NodeStarted,
            node_id=_node,
            visit=_visit,
            attempt=st.integers(1, 2),
            branch=st.none() | st.just("b"),
        ),
        st.builds(NodeCompleted, node_id=_node),
        st.builds(
            NodeFailed,
            node_id=_node,
            error=st.just("e"),
            error_type=st.just("E"),
            attempt=st.just(1),
            will_retry=st.booleans(),
        ),
        _writes,
        _writes,
        st.just(RunFinished(status="failed", quality="failed")),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_visit_steps)
def test_a_visit_s_previous_outputs_stay_what_was_written_when_it_began(
    bodies: list[EventBody],
) -> None:
    # A visit begins with the memory the node before it wrote, as it was then: later writes
    # (by that node running again beside it, or after it finished) do not change it.
    state = new_state("r")
    began: list[tuple[object, dict[str, object]]] = []
    for seq, body in enumerate(bodies, 1):
        before = state.visits.get(state.path[-1]) if state.path else None
        expected = dict(before.written) if before is not None else {}
        visits = dict(state.visits)
        apply(state, body, seq)
        if isinstance(body, NodeStarted):
            visit = state.visits[body.node_id]
            if visit is not visits.get(body.node_id):
                assert visit.previous_outputs == expected
                began.append((visit, expected))
        for visit, outputs in began:
            assert visit.previous_outputs == outputs  # type: ignore[attr-defined]
    folded = fold(as_log("r", bodies))
    assert (state.visits, state.outputs, state.memory) == (
        folded.visits,
        folded.outputs,
        folded.memory,
    )


def test_a_visit_s_previous_outputs_do_not_follow_its_predecessor_s_later_writes() -> None:
    def write(node: str, key: str, value: int) -> MemoryWritten:
        return MemoryWritten(key=key, value=value, node_id=node)

    # "a" runs again (the same visit) and writes while "b", begun after it, runs beside it;
    # then "a" finishes and a write in its name comes after.
    bodies: list[EventBody] = [
        NodeStarted(node_id="a", visit=1, attempt=1),
        write("a", "k", 1),
        NodeCompleted(node_id="a"),
        NodeStarted(node_id="a", visit=1, attempt=2),
        write("a", "k", 2),
        NodeStarted(node_id="b", visit=1, attempt=1),
        write("a", "j", 3),
        NodeCompleted(node_id="a"),
        NodeStarted(node_id="c", visit=1, attempt=1),
        write("a", "k", 4),
    ]
    state = new_state("r")
    for seq, body in enumerate(bodies, 1):
        apply(state, body, seq)
    assert state.visits["b"].previous_outputs == {"k": 2}
    assert state.visits["c"].previous_outputs == {"k": 2, "j": 3}
    assert state.visits["a"].written == {"k": 4, "j": 3}
    assert state.visits == fold(as_log("r", bodies)).visits
