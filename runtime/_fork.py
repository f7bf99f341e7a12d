"""Forking a run: a new run whose log starts as a copy of another run's first events.

The copy is appended to the new run in one atomic batch, so the store re-chains it (every
hash covers the new run id) and a fork is either wholly written or not at all. The batch
ends with a :class:`RunForked` event that records where the copy came from, including the
source's chain hash at that seq, so an auditor can tie the fork back to the source's log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import cast

from eventstore import Event, EventBody

from ._errors import RunNotFoundError, RunStateError
from ._run_logs import RunLogs
from .control._ownership import RunOwnership
from .events._catalogue import BranchesForked, EdgeTaken, RunFinished, RunForked
from .events._state import fold
from .spec._load import graph_from_dict
from .spec._model import GraphSpec

__all__ = ["copy_prefix"]


def _edges_end(events: list[Event], at_seq: int) -> int:
    """The seq of the last of the edge events of the step whose edge ``at_seq`` is (its
    ``edge.taken`` events and its ``branches.forked``, which follow each other), or
    ``at_seq`` itself when it is not an edge or ends its step's."""
    body = events[at_seq - 1].body
    if type(body) is not EdgeTaken:
        return at_seq
    end = at_seq
    while end < len(events):
        after = events[end].body
        if type(after) not in (EdgeTaken, BranchesForked):
            break
        if cast(EdgeTaken | BranchesForked, after).source != body.source:
            break
        end += 1
    return end


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
    the log, the prefix already holds the run's end (a finished run cannot go on) or it
    ends between a node's completion and its edge, and
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
    state = fold(prefix)
    if state.status == "running" and state.path and not state.pending and not state.running:
        # The prefix ends inside a step: a node completed and its edges are not taken yet.
        # Resumed from there, the run would end without them.
        raise RunStateError(
            run_id,
            fold(events).status,
            f"cannot fork at seq {at_seq}: node {state.path[-1]!r} completed there and its "
            f"outgoing edge is not taken yet; fork at the edge's seq or before the node",
        )
    step_end = _edges_end(events, at_seq)
    if step_end != at_seq:
        # Among a fan-out's edges (or before its branches.forked): resumed from there, the
        # run would go on with some of its branches, or none joined.
        node = cast(EdgeTaken, prefix[-1].body).source
        raise RunStateError(
            run_id,
            fold(events).status,
            f"cannot fork at seq {at_seq}: it is among node {node!r}'s edges, which end at "
            f"seq {step_end}; fork there or before the node",
        )
    if check is not None and state.graph is not None:
        check(graph_from_dict(state.graph))
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
