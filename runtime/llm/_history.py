"""What an LLM node knows of its past: a view of the run state, never a second record.

An LLM node keeps nothing that the log does not hold, and reads nothing but the run's
state: at the start of every attempt it takes :func:`history_of` the live state its run
log holds (the fold of the log so far, kept by :func:`runtime.events._state.apply`; on a resume,
the fold of the stored log, read through its snapshot). For the visit it runs (a rerun
after an input pause or a crash keeps its visit) that gives: the conversation the node
sees, its output accumulator, its last turn's iteration, the tool calls of its turns (for
stall detection), the calls of the last turn whose results are missing, the verdict on
the last turn, and what happened before it (the previous node on the path and its
outputs, for the phase-transition marker). Nothing is read from the store, so an
attempt's start does not grow with the log.

The conversation is :class:`runtime.events._conversation.Conversation`, the projection
the run-state fold keeps; the node sees its
:meth:`~runtime.events._conversation.Conversation.scope`.
The visit is the state's :class:`runtime.events._node_visit.NodeVisit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore import Event

from ..events._catalogue import LlmTurn, ToolCallRecord, Verdict
from ..events._conversation import ConversationEntry
from ..events._state import RunState, fold
from ..providers._base import refusal, truncated

__all__ = ["NodeHistory", "history_of", "rebuild"]


@dataclass
class NodeHistory:
    """The rebuilt state of one node's current visit (see the module docstring)."""

    node_id: str
    graph: dict[str, Any] | None = None
    visit: int = 0
    entries: list[ConversationEntry] = field(default_factory=list)
    accumulator: dict[str, Any] = field(default_factory=dict)
    #: Recorded turns of this visit (the last one's ``iteration``).
    iteration: int = 0
    #: Tool calls of each turn since the visit began or the user last answered, oldest first.
    turn_calls: list[list[ToolCallRecord]] = field(default_factory=list)
    last_turn: LlmTurn | None = None
    #: Calls of the last turn that have no ToolResult (the run stopped while they ran).
    missing_calls: list[ToolCallRecord] = field(default_factory=list)
    #: The Verdict recorded on the last turn, if any.
    last_verdict: Verdict | None = None
    #: Whether the node recorded anything in this visit yet (transition, inputs, turns).
    opened: bool = False
    #: The node that finished last before this visit, and the memory it wrote.
    previous_node: str | None = None
    previous_outputs: dict[str, Any] = field(default_factory=dict)
    #: Data injected after this node paused for input and not yet shown to the model.
    pending_input: dict[str, Any] | None = None
    #: Whether the model was shown user input since the last verdict.
    answered_since_verdict: bool = False

    @property
    def ended(self) -> tuple[str, str] | None:
        """The failure the last turn is, and its error type, when no verdict followed
        (recorded before a crash): the model refused it (``Refused``: see
        :func:`runtime.providers._base.refusal`) or it was cut at the token cap twice
        (``TruncatedError``: see :func:`runtime.providers._base.truncated`)."""
        last = self.last_turn
        if last is None or self.last_verdict is not None:
            return None
        refused = refusal(last.stop, last.text)
        if refused is not None:
            return refused, "Refused"
        cut = truncated(last.stop)
        return None if cut is None else (cut, "TruncatedError")


def history_of(state: RunState, node_id: str, visit: int) -> NodeHistory:
    """``node_id``'s visit number ``visit`` as ``state`` records it (a new view each call).

    A visit whose NodeStarted the state has not applied yet starts after everything
    applied so far. Costs what the node's own part of the state holds (its scope of the
    conversation, its turns), never a read of the log.
    """
    history = NodeHistory(node_id=node_id, graph=state.graph, visit=visit)
    history.entries = state.conversation.scope(node_id, visit=visit)
    record = state.visits.get(node_id)
    if record is None or record.visit != visit:
        previous = state.path[-1] if state.path else None
        history.previous_node = previous
        before = state.visits.get(previous) if previous is not None else None
        if before is not None:
            history.previous_outputs = dict(before.written)
        return history
    history.accumulator = dict(state.outputs.get(node_id, {}))
    history.iteration = state.iterations.get(node_id, 0)
    history.turn_calls = list(record.turn_calls)
    history.last_turn = record.last_turn
    history.missing_calls = list(record.missing_calls)
    history.last_verdict = record.last_verdict
    history.opened = record.opened
    history.previous_node = record.previous_node
    history.previous_outputs = dict(record.previous_outputs)
    if record.paused_for_input and record.injected:
        history.pending_input = dict(record.injected)
    history.answered_since_verdict = record.answered_since_verdict
    return history


def rebuild(events: Sequence[Event], node_id: str, *, visit: int | None = None) -> NodeHistory:
    """:func:`history_of` the fold of ``events`` (``visit`` default: the node's last).

    Pure: the same events always give the same history. For reading a stored log; a
    running node reads its run log's live state instead.
    """
    state = fold(events)
    if visit is None:
        record = state.visits.get(node_id)
        visit = record.visit if record is not None else 0
    return history_of(state, node_id, visit)
