"""A run's state and the one function that applies an event to it.

:func:`apply` is the only code that turns events into state: :func:`fold` (a log into its
state), the executor's live state (it records an event, the run log applies it, and the
executor decides from the state) and a resume (fold the log, continue with that object)
all use it. ``fold`` is pure and deterministic: ``fold(b, fold(a)) == fold(a + b)``,
folding a prefix of a log is time travel, and ``fold`` never mutates the state passed in.

Memory writes follow the reducer rules of :mod:`._memory`; judge verdicts and stall warnings
are kept as :mod:`._verdicts` says.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from eventstore import Event, EventBody, event_tag

from ._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    BranchesForked,
    BranchesJoined,
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
    ConversationCompacted,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    PauseRequested,
    Quality,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    RunUnrunnable,
    StallDetected,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from ._conversation import Conversation
from ._fanout import OpenFanOut, fanout_apply, fanout_opened
from ._memory import disown, write_memory
from ._node_visit import NO_INJECTED, NodeVisit, visit_started, visit_written
from ._run_facts import ForkOrigin, PauseInfo
from ._shared_empty import NO_ITEMS
from ._state_copy import copy_state
from ._verdicts import (
    JudgeFailure,
    StallEntry,
    VerdictEntry,
    VerdictRecord,
    count_verdict,
    goal_failures,
    keep,
    keep_failure,
    stall_entry,
    verdict_entry,
    verdict_record,
)

__all__ = ["ForkOrigin", "PauseInfo", "RunState", "StateStatus", "apply", "fold"]


#: A run's status in its state: "new" before its first event, then as its events say.
StateStatus = Literal["new", "running", "paused", "cancelled", "completed", "failed"]


class RunState(msgspec.Struct, kw_only=True, dict=True):
    """The state of a run as its events made it. Compare with ``==`` (fields only).

    ``pending`` lists the nodes due to run next (the resume points; the join of an open
    fan-out is due once the branches joined); ``running`` maps a started, unfinished node
    (running, or waiting to retry after a failed attempt) to its attempt; ``path`` lists
    nodes in the order they finished (completed, or failed for good); ``steps`` counts node
    visits (a retry or a rerun after a crash is the same visit); ``outputs`` holds each
    running node's output accumulator for its visit (its OutputSet values: empty when a
    new visit starts or a failed attempt is to be retried, kept across a rerun of the
    same visit, gone when the node finishes); ``iterations`` is the iteration of each
    node's last LLM turn in its current visit; ``visits`` holds each started node's
    current visit (:class:`NodeVisit`: what an LLM node, a parallel round and an
    ``llm_judge`` verifier resume from). ``last_seq`` /
    ``last_hash`` / ``last_position`` describe the last folded event (a live state sets
    ``last_seq`` only).
    """

    run_id: str = ""
    status: StateStatus = "new"
    graph: dict[str, Any] | None = None
    graph_hash: str | None = None
    entry: str | None = None
    goal: dict[str, Any] | None = None
    input: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    path: list[str] = []
    visit_counts: dict[str, int] = {}
    steps: int = 0
    pending: list[str] = []
    running: dict[str, int] = {}
    failed_nodes: list[str] = []
    #: Checks that did not run (judge failures, see _verdicts), counted by kind ...
    judge_failures: dict[str, int] = {}
    #: ... and the newest of them (at most KEPT_FAILURES) with their reasons.
    judge_failure_reasons: list[JudgeFailure] = []
    total_retries: int = 0
    #: The open fan-out (forked, not yet joined), if any: its branches and their writes.
    fanout: OpenFanOut | None = None
    outputs: dict[str, dict[str, Any]] = {}
    #: LLM turns of each node over the whole run (``iterations`` counts the current visit).
    turns: dict[str, int] = {}
    #: Judged verdicts of each node over the run, by action (accept, retry, escalate), and
    #: its tool turns (verdicts of level bail_out: the turn called tools, nobody judged it).
    verdict_counts: dict[str, dict[str, int]] = {}
    tool_turns: dict[str, int] = {}
    #: The run's conversation: a sequence of ConversationEntry built by the projection the
    #: LLM node uses too (parallel branches' entries grouped per branch).
    conversation: Conversation = msgspec.field(default_factory=Conversation)
    iterations: dict[str, int] = {}
    visits: dict[str, NodeVisit] = {}
    verdicts: dict[str, VerdictRecord] = {}
    #: Each node's newest judge verdicts, oldest first: at most KEPT_PER_NODE of them, so a
    #: long run's state (and its snapshots) stays bounded; ``verdict_counts`` and
    #: ``tool_turns`` count all.
    verdict_history: dict[str, list[VerdictEntry]] = {}
    #: Each node's newest stall warnings, oldest first (at most KEPT_PER_NODE).
    stalls: dict[str, list[StallEntry]] = {}
    #: Times each edge was taken, keyed ``"source>target"``, in the order first taken.
    edges_taken: dict[str, int] = {}
    #: The run's events by tag, every type counted (an application's own too).
    event_counts: dict[str, int] = {}
    paused: PauseInfo | None = None
    #: The pause node whose approval the run waits for, kept through a cancel. Gates
    #: ``approval.granted`` opened (until their node starts) and ``approval.rejected`` shut.
    gate: str | None = None
    approved: list[str] = []
    rejected: list[str] = []
    #: A fork's copy ended in the middle of the run: its due nodes that had not started
    #: meet their pause gates when it resumes (a fork never skips an approval). Set by
    #: run.forked, cleared by the resume that follows.
    gates_due: bool = False
    #: A pause asked for (``run.pause_requested``, from any process) that the run's owner
    #: obeys at its next node boundary; cleared when the run pauses, is cancelled or
    #: finishes, and in a fork's copy (a resume keeps it: the resuming owner obeys it).
    pause_requested: bool = False
    #: Where a fork's log was copied from (its ``run.forked`` event); None for other runs.
    forked_from: ForkOrigin | None = None
    #: Why workers that claimed the run could not execute it (``run.unrunnable``): each
    #: distinct reason once, oldest first. Shown only; nothing else depends on it.
    unrunnable: list[str] = []
    cancelled_at: str | None = None
    quality: Quality | None = None
    error: str | None = None
    goal_outcome: dict[str, Any] | None = None
    last_seq: int = 0
    last_hash: str = ""
    last_position: int = 0


def _judge_failed(s: RunState, kind: str, node: str | None, reason: str, seq: int) -> None:
    # Both replaced, not changed in place (shared empty values of a new state, _new_state.py).
    s.judge_failures = {**s.judge_failures, kind: s.judge_failures.get(kind, 0) + 1}
    kept = list(s.judge_failure_reasons)
    keep_failure(kept, seq, kind, node, reason)
    s.judge_failure_reasons = kept


def _finish_node(s: RunState, node_id: str) -> None:
    s.running.pop(node_id, None)
    s.path.append(node_id)
    pending = s.pending
    if node_id in pending:
        pending.remove(node_id)
    s.outputs.pop(node_id, None)


def _due(s: RunState, node_id: str) -> None:
    if node_id not in s.pending:
        s.pending.append(node_id)


# A body's tag by its class (event_tag reads it from the class's config on every call).
_TAGS: dict[type, str] = {}


def _tag(cls: type) -> str:
    tag = _TAGS[cls] = event_tag(cls)
    return tag


def apply(state: RunState, body: EventBody, seq: int) -> None:
    """Apply one event body, the run's event ``seq``, to ``state``, in place; the one place
    events become state.

    Total: a log is replayed as it is, never refused, so every body applies (a memory
    write of an unexpected shape follows the reducer rules in the module docstring), and
    a body without a meaning for the state (a type registered by an application) only
    counts in ``event_counts`` (so does a ``snapshot.taken``: the snapshot it binds holds
    the state it leaves, its own count included). ``seq`` is recorded with the verdicts
    and stall warnings the state keeps; apply does not touch ``last_seq`` / ``last_hash`` /
    ``last_position`` (the envelope's; see :func:`fold`). Lists the state grew for
    ``append`` writes stay the state's own: do not change them from outside.
    """
    s = state
    tag = _TAGS.get(type(body)) or _tag(type(body))
    counts = s.event_counts
    counts[tag] = counts.get(tag, 0) + 1
    match body:
        case NodeStarted():
            node = body.node_id
            visit_counts = s.visit_counts
            if body.visit > visit_counts.get(node, 0):
                s.steps += 1
            s.running[node] = body.attempt
            if s.approved and node in s.approved:  # the gate it opened is passed
                approved = list(s.approved)  # replaced, not changed in place (_new_state.py)
                approved.remove(node)
                s.approved = approved
            visit_started(s, node, body.visit)
            # Before visit_counts: a new live state's conversation records its visits in
            # that same map (_new_state.py), and tells a new visit by the number it holds.
            s.conversation.started(body)
            visit_counts[node] = body.visit
            if s.fanout is not None:
                fanout_apply(s.fanout, body)
        case MemoryWritten():
            write_memory(s, body)
            if s.fanout is not None:
                fanout_apply(s.fanout, body)
            if body.node_id is not None:
                visit_written(s, body.node_id, body.key, body.value)
        case NodeCompleted():
            _finish_node(s, body.node_id)
        case EdgeTaken():
            target = body.target
            # Interned: every run of a graph keys its counts by the same strings.
            edge = sys.intern(f"{body.source}>{target}")
            edges_taken = s.edges_taken
            edges_taken[edge] = edges_taken.get(edge, 0) + 1
            if body.judge_error is not None:
                _judge_failed(s, "route", body.source, body.judge_error, seq)
            fan = s.fanout
            if fan is None:
                if target not in s.pending:  # _due, inline on every step's path
                    s.pending.append(target)
            else:
                if body.target != fan.join:  # the join is due once the branches joined
                    _due(s, body.target)
                fanout_apply(fan, body)
        case OutputSet():
            values = s.outputs.get(body.node_id)
            if values is None or values is NO_ITEMS:
                values = s.outputs[body.node_id] = {}
            values[body.key] = body.value
        case LlmTurn():
            node = body.node_id
            s.conversation.apply(body)
            s.iterations[node] = body.iteration
            turns = s.turns
            if turns is NO_ITEMS:
                turns = s.turns = {}
            turns[node] = turns.get(node, 0) + 1
            visit = s.visits.get(node)
            if visit is not None:
                visit.turn(body)
        case ToolResult():
            s.conversation.apply(body)
            visit = s.visits.get(body.node_id)
            if visit is not None:
                visit.result(body.call_id)
        case MessageAdded():
            s.conversation.apply(body)
            visit = s.visits.get(body.node_id)
            if visit is not None:
                visit.message(body.kind)
        case ConversationCompacted():
            s.conversation.apply(body)
        case Verdict():
            if body.error is not None:
                _judge_failed(s, "judge", body.node_id, body.error, seq)
            visit = s.visits.get(body.node_id)
            if visit is not None:
                visit.verdict(body)
            if s.verdicts is NO_ITEMS:  # shared empty values of a new state: replaced
                s.verdicts = {}
            if s.verdict_history is NO_ITEMS:
                s.verdict_history = {}
            if s.verdict_counts is NO_ITEMS:
                s.verdict_counts = {}
            if s.tool_turns is NO_ITEMS:
                s.tool_turns = {}
            s.verdicts[body.node_id] = verdict_record(body)
            count_verdict(s.verdict_counts, s.tool_turns, body)
            keep(s.verdict_history, body.node_id, verdict_entry(body, seq))
        case StallDetected():
            if s.stalls is NO_ITEMS:
                s.stalls = {}
            keep(s.stalls, body.node_id, stall_entry(body, seq))
        case NodeFailed():
            if body.will_retry:
                s.total_retries += 1  # still running: it waits for its next attempt
                s.outputs[body.node_id] = NO_ITEMS  # the next attempt starts afresh
            else:
                s.failed_nodes = [*s.failed_nodes, body.node_id]
                _finish_node(s, body.node_id)
            if s.fanout is not None:
                fanout_apply(s.fanout, body)
        case BranchesForked():
            s.conversation.apply(body)
            s.fanout = fanout_opened(body)
            for target in body.targets:
                if target != body.join:
                    _due(s, target)
        case BranchesJoined():
            s.conversation.apply(body)
            s.fanout = None
            if body.join is not None:
                _due(s, body.join)
        case (
            BranchTurn()
            | BranchToolResult()
            | BranchFinished()
            | BranchesJudged()
            | BranchesSelected()
        ):
            if isinstance(body, BranchesJudged) and body.error is not None:
                _judge_failed(s, "branch_judge", body.node_id, body.error, seq)
            visit = s.visits.get(body.node_id)
            if visit is not None and visit.visit == body.visit:
                visit.branch_event(body)
        case VerificationRecorded():
            visit = s.visits.get(body.node_id)
            if visit is not None and visit.visit == body.visit:
                visit.verifications = {**visit.verifications, body.attempt: body}
        case GraphReplaced():  # the run goes on under another graph
            s.graph, s.graph_hash = body.graph, body.graph_hash
        case RunStarted():
            s.status = "running"
            s.graph, s.graph_hash, s.entry = body.graph, body.graph_hash, body.entry
            s.goal, s.input = body.goal, body.input
            s.memory = dict(body.input)
            disown(s)
            s.conversation.apply(body)
            _due(s, body.entry)
        case InputInjected():
            s.memory.update(body.data)
            disown(s, body.data)
            for visit in s.visits.values():
                if visit.paused_for_input:
                    visit.injected = {**visit.injected, **body.data}
        case PauseRequested():
            if s.status == "running":
                s.pause_requested = True
        case RunPaused():
            s.status = "paused"
            s.pause_requested = False
            s.paused = PauseInfo(reason=body.reason, node_id=body.node_id)
            if body.reason == "hitl":
                s.gate = body.node_id
            if body.reason == "input" and body.node_id is not None:
                visit = s.visits.get(body.node_id)
                if visit is not None:
                    visit.paused_for_input = True
                    visit.injected = NO_INJECTED
        case ApprovalGranted():
            s.memory.update(body.input)
            disown(s, body.input)
            s.status = "running"
            s.paused = None
            s.gate = None
            s.approved = [*s.approved, body.node_id]
        case ApprovalRejected():
            s.status = "running"
            s.paused = None
            s.gate = None
            s.rejected = [*s.rejected, body.node_id]
        case RunResumed():
            s.status = "running"
            s.paused = None
            s.error = None  # why it had stopped (a cancel's reason, a failure)
            s.gates_due = False
        case RunForked():
            s.gates_due = s.status == "running"
            s.pause_requested = False  # the source's request: not the copy's
            s.forked_from = ForkOrigin(
                run_id=body.source_run_id, seq=body.source_seq, hash=body.source_hash
            )
        case RunUnrunnable():
            if body.reason not in s.unrunnable:
                s.unrunnable = [*s.unrunnable, body.reason]
        case RunCancelled():
            s.status = "cancelled"
            s.pause_requested = False
            s.cancelled_at = body.node_id
            s.paused = None
            if body.reason:
                s.error = body.reason
        case RunFinished():
            s.status = body.status
            s.quality = body.quality
            s.total_retries = max(s.total_retries, body.total_retries)
            s.error = body.error
            s.goal_outcome = body.goal_outcome
            for reason in goal_failures(body.goal_outcome):
                _judge_failed(s, "goal", None, reason, seq)
            s.pending = []
            s.running = {}
            s.paused = None
            s.gate = None
            s.fanout = None
            s.pause_requested = False
        case _:
            pass


def fold(events: Iterable[Event], state: RunState | None = None) -> RunState:
    """Apply ``events`` (one run's, in seq order) to ``state`` (default: a new run).

    Pure: returns a new state and leaves ``state`` and the events untouched (the new state
    shares no list it may grow with ``state``). Sets ``run_id`` and ``last_seq`` /
    ``last_hash`` / ``last_position`` from the last event.
    """
    s = RunState() if state is None else copy_state(state)
    last: Event | None = None
    for event in events:
        apply(s, event.body, event.seq)
        last = event
    if last is not None:
        s.run_id = last.run_id
        s.last_seq = last.seq
        s.last_hash = last.hash
        s.last_position = last.position
    return s
