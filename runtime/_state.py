"""The projection of a run's events into its state: ``fold``, pure and deterministic.

``fold(b, fold(a)) == fold(a + b)``, and folding a prefix of a log is time travel: the
state as it was after that event. ``fold`` never mutates the state passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from eventstore import Event, EventBody

from ._conversation_state import Conversation, ConversationEntry
from ._events import (
    BranchesForked,
    BranchesJoined,
    ConversationCompacted,
    EdgeTaken,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    RunCancelled,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    ToolResult,
    Verdict,
)

__all__ = ["ConversationEntry", "PauseInfo", "RunState", "VerdictRecord", "fold"]


class VerdictRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The last judge verdict of a node."""

    iteration: int
    action: str
    level: str
    feedback: str = ""


class PauseInfo(msgspec.Struct, frozen=True, kw_only=True):
    reason: str
    node_id: str | None


class RunState(msgspec.Struct, kw_only=True):
    """The state of a run as its events made it. Compare with ``==``.

    ``pending`` lists the nodes due to run next (the resume points); ``running`` maps a
    started, unfinished node to its attempt; ``path`` lists nodes in the order they finished
    (completed, or failed for good); ``outputs`` holds each running node's output
    accumulator; ``iterations`` counts LLM turns since the node last started.
    """

    run_id: str = ""
    status: str = "new"
    graph: dict[str, Any] | None = None
    graph_hash: str | None = None
    entry: str | None = None
    goal: dict[str, Any] | None = None
    input: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    path: list[str] = []
    visit_counts: dict[str, int] = {}
    pending: list[str] = []
    running: dict[str, int] = {}
    failed_nodes: list[str] = []
    total_retries: int = 0
    outputs: dict[str, dict[str, Any]] = {}
    #: The run's conversation: a sequence of ConversationEntry built by the projection the
    #: LLM node uses too (parallel branches' entries grouped per branch).
    conversation: Conversation = msgspec.field(default_factory=Conversation)
    iterations: dict[str, int] = {}
    verdicts: dict[str, VerdictRecord] = {}
    paused: PauseInfo | None = None
    cancelled_at: str | None = None
    quality: str | None = None
    error: str | None = None
    goal_outcome: dict[str, Any] | None = None
    last_seq: int = 0
    last_hash: str = ""
    last_position: int = 0


def _copy(state: RunState) -> RunState:
    # Containers are copied; their values are shared, which is safe because fold never
    # mutates a value it did not create in the same call (see _Folder.owned).
    return RunState(
        run_id=state.run_id,
        status=state.status,
        graph=state.graph,
        graph_hash=state.graph_hash,
        entry=state.entry,
        goal=state.goal,
        input=state.input,
        memory=dict(state.memory),
        path=list(state.path),
        visit_counts=dict(state.visit_counts),
        pending=list(state.pending),
        running=dict(state.running),
        failed_nodes=list(state.failed_nodes),
        total_retries=state.total_retries,
        outputs={node: dict(values) for node, values in state.outputs.items()},
        conversation=state.conversation.copy(),
        iterations=dict(state.iterations),
        verdicts=dict(state.verdicts),
        paused=state.paused,
        cancelled_at=state.cancelled_at,
        quality=state.quality,
        error=state.error,
        goal_outcome=state.goal_outcome,
        last_seq=state.last_seq,
        last_hash=state.last_hash,
        last_position=state.last_position,
    )


def _run_started(s: RunState, b: Any, owned: set[str]) -> None:
    s.status = "running"
    s.graph, s.graph_hash, s.entry = b.graph, b.graph_hash, b.entry
    s.goal, s.input = b.goal, b.input
    s.memory = dict(b.input)
    owned.clear()
    s.conversation.apply(b)
    if b.entry not in s.pending:
        s.pending.append(b.entry)


def _node_started(s: RunState, b: Any, owned: set[str]) -> None:
    s.visit_counts[b.node_id] = b.visit
    s.running[b.node_id] = b.attempt
    s.outputs[b.node_id] = {}
    s.iterations[b.node_id] = 0
    s.conversation.apply(b)


def _llm_turn(s: RunState, b: Any, owned: set[str]) -> None:
    s.conversation.apply(b)
    s.iterations[b.node_id] = s.iterations.get(b.node_id, 0) + 1


def _conversation(s: RunState, b: Any, owned: set[str]) -> None:
    """Tool results, messages, compactions and the branches' join: see Conversation."""
    s.conversation.apply(b)


def _output_set(s: RunState, b: Any, owned: set[str]) -> None:
    values = s.outputs.get(b.node_id)
    if values is None:
        values = s.outputs[b.node_id] = {}
    values[b.key] = b.value


def _verdict(s: RunState, b: Any, owned: set[str]) -> None:
    s.verdicts[b.node_id] = VerdictRecord(
        iteration=b.iteration, action=b.action, level=b.level, feedback=b.feedback
    )


def _memory_written(s: RunState, b: Any, owned: set[str]) -> None:
    key, op = b.key, b.op
    if op == "append":
        if key in owned:
            s.memory[key].append(b.value)  # a list this fold call created: ours to grow
        else:
            # memory[key] = list(old or []) + [value]; a non-list old value becomes the first
            # item (fold must be total: a log is replayed as it is, never refused).
            old = s.memory.get(key)
            grown = list(old) if isinstance(old, list) else ([old] if old else [])
            grown.append(b.value)
            s.memory[key] = grown
            owned.add(key)
    elif op == "merge":
        old = s.memory.get(key)
        merged = dict(old) if isinstance(old, dict) else {}
        if isinstance(b.value, dict):
            merged.update(b.value)
        s.memory[key] = merged
        owned.discard(key)
    else:
        s.memory[key] = b.value
        owned.discard(key)


def _finish_node(s: RunState, node_id: str) -> None:
    s.path.append(node_id)
    if node_id in s.pending:
        s.pending.remove(node_id)
    s.outputs.pop(node_id, None)


def _node_completed(s: RunState, b: Any, owned: set[str]) -> None:
    s.running.pop(b.node_id, None)
    _finish_node(s, b.node_id)


def _node_failed(s: RunState, b: Any, owned: set[str]) -> None:
    s.running.pop(b.node_id, None)
    if b.will_retry:
        s.total_retries += 1
    else:
        s.failed_nodes.append(b.node_id)
        _finish_node(s, b.node_id)


def _edge_taken(s: RunState, b: Any, owned: set[str]) -> None:
    if b.target not in s.pending:
        s.pending.append(b.target)


def _forked(s: RunState, b: Any, owned: set[str]) -> None:
    s.conversation.apply(b)
    for target in b.targets:
        if target not in s.pending:
            s.pending.append(target)


def _paused(s: RunState, b: Any, owned: set[str]) -> None:
    s.status = "paused"
    s.paused = PauseInfo(reason=b.reason, node_id=b.node_id)


def _input_injected(s: RunState, b: Any, owned: set[str]) -> None:
    s.memory.update(b.data)
    owned.difference_update(b.data)


def _resumed(s: RunState, b: Any, owned: set[str]) -> None:
    s.status = "running"
    s.paused = None


def _cancelled(s: RunState, b: Any, owned: set[str]) -> None:
    s.status = "cancelled"
    s.cancelled_at = b.node_id
    s.paused = None
    if b.reason:
        s.error = b.reason


def _finished(s: RunState, b: Any, owned: set[str]) -> None:
    s.status = b.status
    s.quality = b.quality
    s.total_retries = max(s.total_retries, b.total_retries)
    s.error = b.error
    s.goal_outcome = b.goal_outcome
    s.pending = []
    s.running = {}
    s.paused = None


_Handler = Callable[[RunState, Any, set[str]], None]

_HANDLERS: dict[type[EventBody], _Handler] = {
    RunStarted: _run_started,
    NodeStarted: _node_started,
    LlmTurn: _llm_turn,
    ToolResult: _conversation,
    MessageAdded: _conversation,
    ConversationCompacted: _conversation,
    BranchesJoined: _conversation,
    OutputSet: _output_set,
    Verdict: _verdict,
    MemoryWritten: _memory_written,
    NodeCompleted: _node_completed,
    NodeFailed: _node_failed,
    EdgeTaken: _edge_taken,
    BranchesForked: _forked,
    RunPaused: _paused,
    InputInjected: _input_injected,
    RunResumed: _resumed,
    RunCancelled: _cancelled,
    RunFinished: _finished,
}


def fold(events: Iterable[Event], state: RunState | None = None) -> RunState:
    """Apply ``events`` (one run's, in seq order) to ``state`` (default: a new run).

    Pure: returns a new state and leaves ``state`` and the events untouched. Event types
    without a handler (StallDetected, types registered later) only advance
    ``last_seq`` / ``last_hash`` / ``last_position``.
    """
    s = RunState() if state is None else _copy(state)
    owned: set[str] = set()  # memory keys whose list value this call created
    handlers = _HANDLERS
    last: Event | None = None
    for event in events:
        handler = handlers.get(type(event.body))
        if handler is not None:
            handler(s, event.body, owned)
        last = event
    if last is not None:
        s.run_id = last.run_id
        s.last_seq = last.seq
        s.last_hash = last.hash
        s.last_position = last.position
    return s
