"""Each started node's current visit as the event log makes it: what its node resumes from.

The run-state fold keeps one :class:`NodeVisit` per node that started, applied by
:func:`runtime.events._state.apply` like every other part of the state. An LLM node starts an
attempt from it (:func:`runtime.llm._history.history_of`) instead of reading the log, so a
rerun after a crash or an input pause continues exactly where the log left off:

- a visit begins at the node's first ``NodeStarted`` with a new visit number; a rerun of
  the same visit (a resume, a retry) keeps it. Its beginning records the node that
  finished last before it (``RunState.path[-1]``) and the memory that node wrote since it
  last started (the phase-transition marker shows them);
- ``LlmTurn`` opens the visit, makes the turn the last one (no verdict yet, every tool call
  of it missing a result) and records its tool calls for stall detection; ``ToolResult``
  fills one missing call; a ``Verdict`` on the last turn's iteration is its verdict;
- ``MessageAdded`` opens the visit; one of kind ``"input"`` (the user answered) clears
  the stall history and marks the input as shown;
- ``RunPaused`` for input at this node starts collecting ``InputInjected`` data, shown
  to the model when the node runs again (``pending_input``);
- the events of a parallel round of this visit make up ``branch_round``, the round in
  progress (:mod:`runtime.events._branch_round`), which a parallel node resumes from;
- ``VerificationRecorded`` of this visit is kept by attempt in ``verifications``: a rerun
  of an ``llm_judge`` verifier's attempt reuses it instead of asking its evaluator again.

Events of another visit than the current one change nothing here.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from ._branch_round import BranchEvent, BranchRound
from ._catalogue import LlmTurn, ToolCallRecord, Verdict, VerificationRecorded
from ._shared_empty import NO_ITEMS

__all__ = [
    "NO_INJECTED",
    "NO_VERIFICATIONS",
    "NodeVisit",
    "VisitHolder",
    "visit_started",
    "visit_written",
]

#: Shared empty values a new visit starts with (``apply`` makes one per NodeStarted): the
#: fields holding them are replaced when they change, never changed in place, so a plain
#: node's visit makes no dict of its own for them.
NO_INJECTED: dict[str, Any] = {}
NO_VERIFICATIONS: dict[int, VerificationRecorded] = {}


class NodeVisit(msgspec.Struct, kw_only=True, gc=False):
    """One node's current visit (see the module docstring); changed by ``apply`` only.

    ``gc=False``: a visit holds dicts, tuples and events, never itself or its state, so it
    takes part in no reference cycle; one is made per node start, and the collector need
    not track it."""

    visit: int
    #: Memory the node wrote (MemoryWritten with its node_id) since it last started. Never
    #: changed in place but by :func:`visit_written` while its node runs (see there).
    written: dict[str, Any] = {}
    #: The node that finished last before this visit began, and the memory it wrote (that
    #: node's ``written``, shared: never changed in place).
    previous_node: str | None = None
    previous_outputs: dict[str, Any] = {}
    #: Whether the node recorded anything in this visit yet (transition, inputs, turns).
    opened: bool = False
    #: Tool calls of each turn since the visit began or the user last answered, oldest first.
    #: Tuples, replaced (never changed in place): a visit of a plain node, the most common,
    #: then holds no container of its own here.
    turn_calls: tuple[list[ToolCallRecord], ...] = ()
    last_turn: LlmTurn | None = None
    #: Calls of the last turn that have no ToolResult yet.
    missing_calls: tuple[ToolCallRecord, ...] = ()
    #: The Verdict recorded on the last turn, if any.
    last_verdict: Verdict | None = None
    #: Whether the model was shown user input since the last verdict.
    answered_since_verdict: bool = False
    #: Whether the node paused for input and has not been shown the answer yet.
    paused_for_input: bool = False
    #: Data injected since that pause (replaced when it changes, never changed in place).
    injected: dict[str, Any] = {}
    #: The parallel round in progress (its branches' records), if any.
    branch_round: BranchRound | None = None
    #: The verifier results recorded in this visit, by attempt (replaced when it changes,
    #: never changed in place).
    verifications: dict[int, VerificationRecorded] = {}

    def copy(self) -> NodeVisit:
        """An independent copy (events and their lists are immutable and shared)."""
        return NodeVisit(
            visit=self.visit,
            written=dict(self.written),
            previous_node=self.previous_node,
            previous_outputs=self.previous_outputs,
            opened=self.opened,
            turn_calls=self.turn_calls,
            last_turn=self.last_turn,
            missing_calls=self.missing_calls,
            last_verdict=self.last_verdict,
            answered_since_verdict=self.answered_since_verdict,
            paused_for_input=self.paused_for_input,
            injected=self.injected,
            branch_round=None if self.branch_round is None else self.branch_round.copy(),
            verifications=self.verifications,
        )

    def turn(self, body: LlmTurn) -> None:
        self.opened = True
        self.last_turn = body
        self.last_verdict = None
        self.answered_since_verdict = False
        self.turn_calls = (*self.turn_calls, body.tool_calls)
        self.missing_calls = tuple(body.tool_calls)
        held = self.branch_round
        if held is not None and body.iteration > held.round:
            self.branch_round = None  # the winner's turns: the round is over

    def result(self, call_id: str) -> None:
        if self.missing_calls:
            self.missing_calls = tuple(c for c in self.missing_calls if c.id != call_id)

    def verdict(self, body: Verdict) -> None:
        last = self.last_turn
        if last is not None and body.iteration == last.iteration:
            self.last_verdict = body

    def message(self, kind: str) -> None:
        self.opened = True
        if kind == "input":
            # The user answered: what came before no longer counts as a stall, and the
            # data injected so far has been shown.
            self.turn_calls = ()
            self.answered_since_verdict = True
            self.paused_for_input = False
            self.injected = NO_INJECTED

    def branch_event(self, body: BranchEvent) -> None:
        held = self.branch_round
        if held is None or held.round != body.round:
            held = self.branch_round = BranchRound(round=body.round)
        held.record(body)


class VisitHolder(Protocol):
    """What a visit's start and writes change in a run's state (``RunState``; a protocol so
    this module needs no import of it)."""

    path: list[str]
    running: dict[str, int]
    outputs: dict[str, dict[str, Any]]
    iterations: dict[str, int]
    visits: dict[str, NodeVisit]


def visit_started(s: VisitHolder, node_id: str, number: int) -> None:
    """Apply a ``node.started`` of ``node_id``'s visit ``number`` to its visit. A visit's
    ``written`` and a running node's ``outputs`` start as the shared empty map, replaced by
    one of their own at the first write (see :func:`visit_written`, and OutputSet in apply).
    """
    visit = s.visits.get(node_id)
    if visit is not None and visit.visit == number:
        # A rerun of the same visit (a resume, a retry): it goes on where it left off.
        visit.written = NO_ITEMS
        if node_id not in s.outputs:
            s.outputs[node_id] = NO_ITEMS
        return
    previous = s.path[-1] if s.path else None
    before = s.visits.get(previous) if previous is not None else None
    if before is None:
        previous_outputs: dict[str, Any] = NO_ITEMS
    elif previous in s.running:  # it still writes to its map in place: a copy of it now
        previous_outputs = dict(before.written)
    else:  # it writes no more in place (see visit_written): its map is shared, not copied
        previous_outputs = before.written
    s.visits[node_id] = NodeVisit(
        visit=number,
        written=NO_ITEMS,
        previous_node=previous,
        previous_outputs=previous_outputs,
        injected=NO_INJECTED,
        verifications=NO_VERIFICATIONS,
    )
    s.outputs[node_id] = NO_ITEMS
    s.iterations[node_id] = 0


def visit_written(s: VisitHolder, writer: str, key: str, value: Any) -> None:
    """Record a memory write in its node's visit. Only a running node's own map changes in
    place: it made that map after its (re)start, and a map is shared as a later visit's
    ``previous_outputs`` only once its node is not running; a write that comes while the
    node is not running replaces its map, so a visit that shares it sees no change."""
    visit = s.visits.get(writer)
    if visit is None:
        return
    held = visit.written
    if held is NO_ITEMS or writer not in s.running:
        visit.written = {**held, key: value}
    else:
        held[key] = value
