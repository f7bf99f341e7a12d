"""What an LLM node knows of its past: a pure rebuild from the run's event log.

An LLM node keeps nothing that the log does not hold. At the start of every attempt it
reads the log and calls :func:`rebuild`, which returns the node's current visit (the
first ``NodeStarted`` carrying the visit number of the node's last ``NodeStarted``: a
rerun after an input pause or a crash keeps its visit), and, for that visit: the
conversation the node sees, its output accumulator, how many turns it took, the tool
calls of those turns (for stall detection), the calls of the last turn whose results
are missing, the verdict on the last turn, and what happened before it (the previous
node on the path and its outputs, for the phase-transition marker).

The conversation is :class:`._conversation_state.Conversation`, the projection the
run-state fold uses too, applied to the same events; the node sees its
:meth:`~._conversation_state.Conversation.scope`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore import Event

from ._conversation_state import Conversation, ConversationEntry
from ._events import (
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    RunPaused,
    RunStarted,
    ToolCallRecord,
    ToolResult,
    Verdict,
)

__all__ = ["NodeHistory", "rebuild"]


@dataclass
class NodeHistory:
    """The rebuilt state of one node's current visit (see the module docstring)."""

    node_id: str
    graph: dict[str, Any] | None = None
    #: Index in the events of the visit's first NodeStarted (-1: the node never started).
    visit_start: int = -1
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


def rebuild(events: Sequence[Event], node_id: str, *, visit: int | None = None) -> NodeHistory:
    """Rebuild ``node_id``'s visit number ``visit`` (default: its last) from ``events``.

    A visit whose NodeStarted is not in ``events`` yet (a write-behind executor has not
    committed it) starts after the last event. Pure: the same events always give the
    same history.
    """
    history = NodeHistory(node_id=node_id)
    conversation = Conversation()
    last_visit = None
    for event in events:
        body = event.body
        conversation.apply(body)
        if isinstance(body, RunStarted):
            history.graph = body.graph
        elif isinstance(body, NodeStarted) and body.node_id == node_id:
            last_visit = body.visit
    wanted = last_visit if visit is None else visit
    if wanted is not None:
        history.visit = wanted
        history.visit_start = len(events)
        for index, event in enumerate(events):
            body = event.body
            if isinstance(body, NodeStarted) and body.node_id == node_id and body.visit == wanted:
                history.visit_start = index
                break
    history.entries = conversation.scope(node_id, visit=wanted)
    _before_visit(history, events)
    _visit(history, events)
    return history


def _before_visit(history: NodeHistory, events: Sequence[Event]) -> None:
    """The previous node on the path (as the fold computes it) and the memory it wrote."""
    end = history.visit_start if history.visit_start >= 0 else len(events)
    previous: str | None = None
    written: dict[str, dict[str, Any]] = {}
    for event in events[:end]:
        body = event.body
        if isinstance(body, NodeStarted):
            written[body.node_id] = {}
        elif isinstance(body, MemoryWritten) and body.node_id is not None:
            written.setdefault(body.node_id, {})[body.key] = body.value
        elif isinstance(body, NodeCompleted) or (
            isinstance(body, NodeFailed) and not body.will_retry
        ):
            previous = body.node_id
    history.previous_node = previous
    if previous is not None:
        history.previous_outputs = dict(written.get(previous, {}))


def _visit(history: NodeHistory, events: Sequence[Event]) -> None:
    if history.visit_start < 0:
        return
    node_id = history.node_id
    results: set[str] = set()
    paused_for_input = False
    injected: dict[str, Any] = {}
    for event in events[history.visit_start :]:
        body = event.body
        if isinstance(body, RunPaused):
            if body.reason == "input" and body.node_id == node_id:
                paused_for_input = True
                injected = {}
            continue
        if isinstance(body, InputInjected):
            if paused_for_input:
                injected.update(body.data)
            continue
        if getattr(body, "node_id", None) != node_id:
            continue
        if isinstance(body, LlmTurn):
            history.opened = True
            history.iteration = body.iteration
            history.last_turn = body
            history.last_verdict = None
            history.answered_since_verdict = False
            history.turn_calls.append(list(body.tool_calls))
            results = set()
        elif isinstance(body, ToolResult):
            results.add(body.call_id)
        elif isinstance(body, OutputSet):
            history.accumulator[body.key] = body.value
        elif isinstance(body, Verdict):
            if history.last_turn is not None and body.iteration == history.last_turn.iteration:
                history.last_verdict = body
        elif isinstance(body, MessageAdded):
            history.opened = True
            if body.kind == "input":
                # The user answered: what came before no longer counts as a stall, and
                # the data injected so far has been shown.
                history.turn_calls = []
                history.answered_since_verdict = True
                paused_for_input = False
                injected = {}
    if history.last_turn is not None:
        history.missing_calls = [c for c in history.last_turn.tool_calls if c.id not in results]
    if paused_for_input and injected:
        history.pending_input = injected
