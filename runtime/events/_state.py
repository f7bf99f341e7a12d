"""The one function that applies an event to a run's state (its fields: ``_run_state``).

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
from typing import get_args

from eventstore import Event, EventBody, event_tag

from . import _catalogue as events
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
from ._fanout import fanout_apply, fanout_opened
from ._memory import disown, write_memory
from ._node_visit import NO_INJECTED, visit_started, visit_written
from ._run_facts import ForkOrigin, PauseInfo
from ._run_state import RunState, StateStatus
from ._shared_empty import NO_ITEMS
from ._state_copy import copy_state
from ._verdicts import (
    check_failure,
    count_verdict,
    goal_failures,
    keep,
    keep_failure,
    overrules,
    stall_entry,
    verdict_entry,
    verdict_record,
)

__all__ = ["ForkOrigin", "PauseInfo", "RunState", "StateStatus", "apply", "fold"]


def _judge_failed(s: RunState, kind: str, node: str | None, reason: str, seq: int) -> None:
    # Both replaced, not changed in place (shared empty values of a new state, _new_state.py).
    s.judge_failures = {**s.judge_failures, kind: s.judge_failures.get(kind, 0) + 1}
    kept = list(s.judge_failure_reasons)
    keep_failure(kept, seq, kind, node, reason)
    s.judge_failure_reasons = kept


def _overruled(s: RunState, body: Verdict, seq: int) -> None:
    kept = s.verdict_history.get(body.node_id)
    before = kept[-1] if kept and kept[-1].seq == seq - 1 else None
    if before is not None and overrules(body, before):
        why = f"max_iterations accepted the outputs over a {before.level} RETRY"
        _judge_failed(s, "overruled", body.node_id, f"{why}: {before.feedback}", seq)


def _finish_node(s: RunState, node_id: str) -> None:
    s.running.pop(node_id, None)
    s.path.append(node_id)
    pending = s.pending
    if node_id in pending:
        pending.remove(node_id)
    s.outputs.pop(node_id, None)


def _wait_for_input(s: RunState, node_id: str) -> None:
    # The node asked for input: the data injected from now on is shown to it when it runs.
    visit = s.visits.get(node_id)
    if visit is not None:
        visit.paused_for_input = True
        visit.injected = NO_INJECTED


def _due(s: RunState, node_id: str) -> None:
    if node_id not in s.pending:
        s.pending.append(node_id)


# A body's tag by its class (event_tag reads it from the class's config on every call),
# and the catalogue class whose case applies it: its own; for a subclass of one, the
# nearest in its bases; any other class (an application's) is its own, which no case
# names. Matched by identity: a class pattern's isinstance costs ~0.4 us for each case a
# msgspec struct misses (StructMeta's __instancecheck__), 6 misses on every step.
_KINDS: dict[type, tuple[str, type]] = {}
_CATALOGUE = frozenset(get_args(events.AnyEvent))


def _kind(cls: type) -> tuple[str, type]:
    applies_as = next((base for base in cls.__mro__ if base in _CATALOGUE), cls)
    kind = _KINDS[cls] = (event_tag(cls), applies_as)
    return kind


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
    cls = type(body)
    tag, applies_as = _KINDS.get(cls) or _kind(cls)
    counts = s.event_counts
    counts[tag] = counts.get(tag, 0) + 1
    # The four events of every step first, by identity (``is``: a value pattern's ==
    # costs ~0.05 us a miss); the others by the match below.
    if applies_as is NodeStarted:
        # For the type checker: a hit on an exact type is cheap (a miss is not).
        assert isinstance(body, NodeStarted)
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
    elif applies_as is MemoryWritten:
        assert isinstance(body, MemoryWritten)
        if body.op == "replace" and not s.__dict__.get("_owned"):
            s.memory[body.key] = body.value  # write_memory's replace, owning no list
        else:
            write_memory(s, body)
        if s.fanout is not None:
            fanout_apply(s.fanout, body)
        if body.node_id is not None:
            visit_written(s, body.node_id, body.key, body.value)
    elif applies_as is NodeCompleted:
        assert isinstance(body, NodeCompleted)
        _finish_node(s, body.node_id)
    elif applies_as is EdgeTaken:
        assert isinstance(body, EdgeTaken)
        target = body.target
        # Interned: every run of a graph keys its counts by the same strings.
        edge = sys.intern(f"{body.source}>{target}")
        edges_taken = s.edges_taken
        edges_taken[edge] = edges_taken.get(edge, 0) + 1
        if body.judge_error is not None:
            _judge_failed(s, "route", body.source, body.judge_error, seq)
        fan = s.fanout
        if fan is None:
            _due(s, target)
        else:
            if body.target != fan.join:  # the join is due once the branches joined
                _due(s, body.target)
            fanout_apply(fan, body)
    else:
        match applies_as:
            case events.OutputSet:
                assert isinstance(body, OutputSet)
                values = s.outputs.get(body.node_id)
                if values is None or values is NO_ITEMS:
                    values = s.outputs[body.node_id] = {}
                values[body.key] = body.value
            case events.LlmTurn:
                assert isinstance(body, LlmTurn)
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
            case events.ToolResult:
                assert isinstance(body, ToolResult)
                s.conversation.apply(body)
                visit = s.visits.get(body.node_id)
                if visit is not None:
                    visit.result(body.call_id)
            case events.MessageAdded:
                assert isinstance(body, MessageAdded)
                s.conversation.apply(body)
                visit = s.visits.get(body.node_id)
                if visit is not None:
                    visit.message(body.kind)
            case events.ConversationCompacted:
                assert isinstance(body, ConversationCompacted)
                s.conversation.apply(body)
            case events.Verdict:
                assert isinstance(body, Verdict)
                if body.error is not None:
                    _judge_failed(s, "judge", body.node_id, body.error, seq)
                elif body.level == "max_iterations":
                    _overruled(s, body, seq)
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
            case events.StallDetected:
                assert isinstance(body, StallDetected)
                if s.stalls is NO_ITEMS:
                    s.stalls = {}
                keep(s.stalls, body.node_id, stall_entry(body, seq))
            case events.NodeFailed:
                assert isinstance(body, NodeFailed)
                if body.will_retry:
                    s.total_retries += 1
                    # Still running: it waits for its next attempt, which a resume runs.
                    s.running[body.node_id] = body.attempt + 1
                    s.outputs[body.node_id] = NO_ITEMS  # the next attempt starts afresh
                else:
                    s.failed_nodes = [*s.failed_nodes, body.node_id]
                    _finish_node(s, body.node_id)
                if s.fanout is not None:
                    fanout_apply(s.fanout, body)
            case events.BranchesForked:
                assert isinstance(body, BranchesForked)
                s.conversation.apply(body)
                s.fanout = fanout_opened(body)
                for target in body.targets:
                    if target != body.join:
                        _due(s, target)
            case events.BranchesJoined:
                assert isinstance(body, BranchesJoined)
                s.conversation.apply(body)
                s.fanout = None
                if body.join is not None:
                    _due(s, body.join)
            case (
                events.BranchTurn
                | events.BranchToolResult
                | events.BranchFinished
                | events.BranchesJudged
                | events.BranchesSelected
            ):
                assert isinstance(
                    body,
                    BranchTurn
                    | BranchToolResult
                    | BranchFinished
                    | BranchesJudged
                    | BranchesSelected,
                )
                if (failed := check_failure(body)) is not None:
                    _judge_failed(s, failed[0], body.node_id, failed[1], seq)
                visit = s.visits.get(body.node_id)
                if visit is not None and visit.visit == body.visit:
                    visit.branch_event(body)
            case events.VerificationRecorded:
                assert isinstance(body, VerificationRecorded)
                if (failed := check_failure(body)) is not None:
                    _judge_failed(s, failed[0], body.node_id, failed[1], seq)
                visit = s.visits.get(body.node_id)
                if visit is not None and visit.visit == body.visit:
                    visit.verifications = {**visit.verifications, body.attempt: body}
            case events.GraphReplaced:  # the run goes on under another graph
                assert isinstance(body, GraphReplaced)
                s.graph, s.graph_hash = body.graph, body.graph_hash
            case events.RunStarted:
                assert isinstance(body, RunStarted)
                s.status = "running"
                s.graph, s.graph_hash, s.entry = body.graph, body.graph_hash, body.entry
                s.goal, s.input = body.goal, body.input
                s.memory = dict(body.input)
                disown(s)
                s.conversation.run_started(body)
                _due(s, body.entry)
            case events.InputInjected:
                assert isinstance(body, InputInjected)
                s.memory.update(body.data)
                disown(s, body.data)
                for visit in s.visits.values():
                    if visit.paused_for_input:
                        visit.injected = {**visit.injected, **body.data}
            case events.PauseRequested:
                assert isinstance(body, PauseRequested)
                if s.status == "running":
                    s.pause_requested = True
            case events.RunPaused:
                assert isinstance(body, RunPaused)
                s.status = "paused"
                s.pause_requested = False
                s.paused = PauseInfo(reason=body.reason, node_id=body.node_id)
                if body.reason == "hitl":
                    s.gate = body.node_id
                if body.reason == "input" and body.node_id is not None:
                    _wait_for_input(s, body.node_id)
            case events.ApprovalGranted:
                assert isinstance(body, ApprovalGranted)
                s.memory.update(body.input)
                disown(s, body.input)
                s.status = "running"
                s.paused = None
                s.gate = None
                s.approved = [*s.approved, body.node_id]
            case events.ApprovalRejected:
                assert isinstance(body, ApprovalRejected)
                s.status = "running"
                s.paused = None
                s.gate = None
                s.rejected = [*s.rejected, body.node_id]
            case events.RunResumed:
                assert isinstance(body, RunResumed)
                s.status = "running"
                s.paused = None
                s.error = None  # why it had stopped (a cancel's reason, a failure)
                s.gates_due = False
                if body.input_for is not None:  # its pause for input was not recorded
                    _wait_for_input(s, body.input_for)
            case events.RunForked:
                assert isinstance(body, RunForked)
                s.gates_due = s.status == "running"
                s.pause_requested = False  # the source's request: not the copy's
                s.forked_from = ForkOrigin(
                    run_id=body.source_run_id, seq=body.source_seq, hash=body.source_hash
                )
            case events.RunUnrunnable:
                assert isinstance(body, RunUnrunnable)
                if body.reason not in s.unrunnable:
                    s.unrunnable = [*s.unrunnable, body.reason]
            case events.RunCancelled:
                assert isinstance(body, RunCancelled)
                s.status = "cancelled"
                s.pause_requested = False
                s.cancelled_at = body.node_id
                s.paused = None
                if body.reason:
                    s.error = body.reason
            case events.RunFinished:
                assert isinstance(body, RunFinished)
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
