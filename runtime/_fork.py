"""Forking a run: a new run whose log starts as a copy of another run's first events.

The copy is appended to the new run in one atomic batch, so the store re-chains it (every
hash covers the new run id) and a fork is either wholly written or not at all. The batch
ends with a :class:`RunForked` event that records where the copy came from, including the
source's chain hash at that seq, so an auditor can tie the fork back to the source's log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from eventstore import Event, EventBody

from ._errors import RunNotFoundError, RunStateError
from ._run_logs import RunLogs
from .control._ownership import RunOwnership
from .events._catalogue import (
    BranchesForked,
    BranchesJoined,
    BranchesJudged,
    BranchesSelected,
    BranchJudgeWarning,
    EdgeTaken,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    OutputSet,
    RunFinished,
    RunForked,
    StallDetected,
    ToolResult,
    Verdict,
)
from .events._state import fold
from .spec._load import graph_from_dict
from .spec._model import GraphSpec

__all__ = ["copy_prefix"]


def _together(before: EventBody, after: EventBody) -> bool:
    """Whether ``after`` was recorded in one append with ``before``: a cut between them
    leaves a state no run ever had (and no crash can leave), which a resume does not
    go on from as the run did.

    The appends: a node's memory writes with its completion, and its completion (or its
    failure for good) with its edges; a fan-out's edges with its ``branches.forked``, and
    the end of its last branch with its ``branches.joined``; a
    turn's tool results with the outputs its ``set_output`` calls set; a turn with the
    answers to its refused calls; a stall warning with its verdicts, a RETRY with the
    feedback it adds to the conversation, a visit's opening messages with its turn, and
    the branch judge's warning with its call.
    """
    match after:
        case MemoryWritten(node_id=node) if node is not None:
            return isinstance(before, MemoryWritten) and before.node_id == node
        case NodeCompleted(node_id=node):
            return isinstance(before, MemoryWritten) and before.node_id == node
        case BranchesJoined(join=join):
            if isinstance(before, EdgeTaken):
                return before.target == join
            return isinstance(before, NodeCompleted) or (
                isinstance(before, NodeFailed) and not before.will_retry
            )
        case EdgeTaken(source=node) | BranchesForked(source=node):
            if isinstance(before, EdgeTaken | BranchesForked):
                return before.source == node
            if isinstance(before, NodeFailed):
                return before.node_id == node and not before.will_retry
            return isinstance(before, NodeCompleted) and before.node_id == node
        case OutputSet(node_id=node):
            return isinstance(before, ToolResult | OutputSet) and before.node_id == node
        case ToolResult(node_id=node, call_id=call):
            if isinstance(before, LlmTurn):
                return before.node_id == node and _refused(before, call)
            return isinstance(before, ToolResult) and before.node_id == node
        case Verdict(node_id=node):
            return isinstance(before, StallDetected | Verdict) and before.node_id == node
        case BranchesJudged(node_id=node):
            return isinstance(before, BranchJudgeWarning) and before.node_id == node
        case MessageAdded(node_id=node, kind="feedback" | "stall_warning"):
            return isinstance(before, Verdict) and before.node_id == node
        case MessageAdded(node_id=node, kind="inputs" | "input") | LlmTurn(node_id=node):
            # A visit's opening messages ride with its first turn (llm/_turn_loop.py).
            return _opening(before, node)
    return False


def _opening(before: EventBody, node: str) -> bool:
    """Whether ``before`` is one of node ``node``'s opening messages (the transition
    marker, its inputs, the user's input), recorded in one append with what follows."""
    return (
        isinstance(before, MessageAdded)
        and before.node_id == node
        and before.kind in ("transition", "inputs", "input")
    )


def _refused(turn: LlmTurn, call_id: str) -> bool:
    """Whether the turn's call ``call_id`` had arguments that were no JSON object (its
    error result is recorded with the turn)."""
    return any(c.id == call_id and c.raw_arguments is not None for c in turn.tool_calls)


def _inside(events: list[Event], at_seq: int, group_end: int) -> str:
    """Why a fork at ``at_seq``, inside an append that ends at ``group_end``, is refused."""
    cut, end = events[at_seq - 1].body, events[group_end - 1].body
    if isinstance(end, BranchesJoined):
        return (
            f"the branches joined into {end.join!r} at seq {group_end}, in one append with "
            f"it; fork there or before the branch's node"
        )
    if isinstance(cut, EdgeTaken):
        return (
            f"it is among node {cut.source!r}'s edges, which end at seq {group_end}; "
            f"fork there or before the node"
        )
    node = getattr(cut, "node_id", None)
    if isinstance(cut, NodeCompleted | NodeFailed):
        return (
            f"node {node!r} completed there and its outgoing edge is not taken yet (it is, "
            f"in the same append, by seq {group_end}); fork there or before the node"
        )
    return (
        f"node {node!r} recorded it in one append with the events after it, up to seq "
        f"{group_end}; fork there or before it"
    )


def _group_end(events: list[Event], at_seq: int) -> int:
    """The seq of the last event recorded in one append with event ``at_seq`` (as far as
    :func:`_selection_end` and :func:`_together` tell), or ``at_seq`` itself when the next
    append starts after it."""
    end = _selection_end(events, at_seq) or at_seq
    while end < len(events) and _together(events[end - 1].body, events[end].body):
        end += 1
    return end


_WINNER = (LlmTurn, ToolResult, OutputSet)


def _selection_end(events: list[Event], at_seq: int) -> int | None:
    """The seq of the last event of a parallel round's selection when event ``at_seq`` is
    in it: ``branches.selected`` and the winner's turns, tool results and outputs as the
    node's own events, one append (llm/_parallel.py). Turns before the winner's last call
    tools; its last calls none, and only its outputs follow it. None: not in one."""
    start = at_seq - 1
    while start >= 0 and isinstance(events[start].body, _WINNER):
        start -= 1
    selected = events[start].body if start >= 0 else None
    if not isinstance(selected, BranchesSelected):
        return None
    end, last = start + 1, False  # last: the winner's last turn is passed
    while end < len(events):
        body = events[end].body
        if not isinstance(body, _WINNER) or body.node_id != selected.node_id:
            break
        if isinstance(body, LlmTurn):
            if last or body.iteration <= selected.round:
                break
            last = not body.tool_calls
        elif last and not isinstance(body, OutputSet):
            break
        end += 1
    return end if end > at_seq else None  # ``end``: the batch's last index + 1, its seq


async def copy_prefix(
    logs: RunLogs,
    run_id: str,
    at_seq: int,
    *,
    new_run_id: str | None = None,
    ownership: RunOwnership | None = None,
    check: Callable[[GraphSpec], None] | None = None,
) -> str:
    """Write the new run (the copy of ``run_id``'s seqs 1..``at_seq`` and a RunForked event)
    and return its id. Nothing is resumed here. With ``ownership``, the new run is claimed
    for it with the copy (see :meth:`RunOwnership.claim_start`). ``check`` is called with
    the run's graph before anything is written (what it raises, say SpecErrors for a graph
    this runtime may not run, leaves no fork behind).

    Raises RunNotFoundError for an unknown run, RunStateError when ``at_seq`` is outside
    the log, the prefix already holds the run's end (a finished run cannot go on), it
    ends between a node's completion and its edge, or inside what one append recorded
    (:func:`_group_end`), and
    the store's errors (CorruptLogError if the hash chain of seqs 1..``at_seq`` is broken,
    ConcurrencyError if ``new_run_id`` already exists).
    """
    events: list[Event] = await logs.read_events(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    last = events[-1].seq
    if not 1 <= at_seq <= last:
        raise RunStateError(
            run_id, fold(events).status, f"cannot fork at seq {at_seq}: its log has seqs 1..{last}"
        )
    prefix = events[:at_seq]
    if logs.store is not None:
        # The copy is re-chained under the new id: a prefix that does not verify (its chain,
        # or the heads recorded in it) would come out of the fork with a chain that does.
        # CorruptLogError refuses it.
        prefix = await logs.read_verified(run_id, to_seq=at_seq)
    for event in prefix:
        if isinstance(event.body, RunFinished):
            raise RunStateError(
                run_id,
                event.body.status,
                f"cannot fork at seq {at_seq}: the run finished at seq {event.seq}; "
                f"fork at an earlier seq",
            )
    group_end = _group_end(events, at_seq)
    if group_end != at_seq:
        # Inside what one append recorded: resumed from there, the run would go on with
        # some of a fan-out's branches, none joined, a node's output lost or a RETRY
        # without its feedback (_together).
        raise RunStateError(
            run_id,
            fold(events).status,
            f"cannot fork at seq {at_seq}: {_inside(events, at_seq, group_end)}",
        )
    state = fold(prefix)
    if state.status == "running" and state.path and not state.pending and not state.running:
        # The prefix ends inside a step: a node completed and its edges are not taken yet
        # (in a later append: an llm_decide edge asks a model first). Resumed from there,
        # the run would end without them.
        raise RunStateError(
            run_id,
            fold(events).status,
            f"cannot fork at seq {at_seq}: node {state.path[-1]!r} completed there and its "
            f"outgoing edge is not taken yet; fork at the edge's seq or before the node",
        )
    if check is not None and state.graph is not None:
        check(graph_from_dict(state.graph, recorded=True))
    source = prefix[-1]
    bodies: list[EventBody] = [event.body for event in prefix]
    bodies.append(RunForked(source_run_id=run_id, source_seq=at_seq, source_hash=source.hash))
    if ownership is None:
        new_id = new_run_id or uuid.uuid4().hex
    else:
        # A copy that ends running is runnable to any worker once committed: claimed
        # with it (or before it), so nobody takes it between the commit and a claim.
        new_id = await ownership.claim_start(new_run_id, durable=True)
    try:
        await logs.create(new_id).append(bodies)
    except BaseException:
        if ownership is not None:
            await ownership.release(new_id)
        raise
    return new_id
