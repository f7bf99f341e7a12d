"""Taking another process's pause requests into a live run's log without stopping it.

A pause asked for from outside the run's owner is one ``run.pause_requested`` appended to
the run's log. The owner's next append then meets it (ConcurrencyError), or its watch of
the store's heads sees it first. Either way the owner takes the request in: it applies it
to the live state (``RunState.pause_requested``, which the executor's pause points obey at
the next node boundary, as an in-process pause), numbers its own events after it, and goes
on, so the node running now is not interrupted. Anything else another process appended
(a cancel, input, an approval) is not taken in: the runtime settles the run from its log.

Only while no other batch of the run's is in flight (``RunLog.in_flight``): their numbers
would be wrong too, and the run is then settled from its log, as for any other conflict.
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeVar

import msgspec

from eventstore import Event, EventStore

from ..events._catalogue import PauseRequested
from ..events._state import RunState, apply
from ..events._verdicts import StallEntry, VerdictEntry

__all__ = ["take_in_at", "take_in_foreign"]

_Entry = TypeVar("_Entry", VerdictEntry, StallEntry)


class RunLog(Protocol):
    """What this module reads and moves of a run's log (``_runlog.RunLog``)."""

    run_id: str
    store: EventStore | None
    state: RunState
    last_seq: int
    snapshot_seq: int
    in_flight: int
    failed: BaseException | None


async def _requests_after(log: RunLog, seq: int) -> list[Event] | None:
    """The run's committed events after ``seq`` if they are all pause requests (or there
    are none), else None."""
    assert log.store is not None
    events = [event async for event in log.store.read(log.run_id, from_seq=seq + 1)]
    if not all(type(event.body) is PauseRequested for event in events):
        return None
    return events


def _renumber(kept: dict[str, list[_Entry]], at: int, shift: int) -> None:
    for node_id, entries in kept.items():
        if entries and entries[-1].seq > at:
            kept[node_id] = [
                msgspec.structs.replace(e, seq=e.seq + shift) if e.seq > at else e for e in entries
            ]


def _take(log: RunLog, at: int, events: list[Event]) -> int:
    """Number everything this log numbered after ``at`` after ``events`` (the foreign
    events at ``at + 1``...), and apply ``events`` to the live state. Every seq the state
    records (verdicts, stall warnings, judge failures) moves with it."""
    shift = len(events)
    state = log.state
    _renumber(state.verdict_history, at, shift)
    _renumber(state.stalls, at, shift)
    failures = state.judge_failure_reasons
    if failures and failures[-1].seq > at:
        state.judge_failure_reasons = [
            msgspec.structs.replace(f, seq=f.seq + shift) if f.seq > at else f for f in failures
        ]
    log.last_seq += shift
    state.last_seq += shift
    if log.snapshot_seq > at:
        log.snapshot_seq += shift
    for event in events:
        apply(state, event.body, event.seq)
    return shift


async def take_in_at(log: RunLog, expected: int) -> int:
    """The batch appended at ``expected`` met another writer's events: take them in if
    they are only pause requests and no other batch is in flight; return how many were
    taken in (0: none, the conflict stands)."""
    if log.in_flight or log.failed is not None:
        return 0
    events = await _requests_after(log, expected)
    if not events or log.in_flight:
        return 0
    return _take(log, expected, events)


async def take_in_foreign(log: RunLog) -> Literal["taken", "busy", "other"]:
    """Another process appended to the run (its head in the store is past this log's):
    take its pause requests in now, before the owner's next append meets them. "busy":
    a batch is in flight (its answer, or the next look, decides); "other": something
    else was appended, the run must be settled from its log."""
    if log.failed is not None:
        return "other"
    if log.in_flight or log.store is None:
        return "busy"
    at = log.last_seq
    events = await _requests_after(log, at)
    if log.in_flight or log.last_seq != at:
        return "busy"  # appended meanwhile: looked at again later
    if events is None:
        return "other"
    if not events:
        return "busy"
    _take(log, at, events)
    return "taken"
