"""When a run log's batch carries a snapshot of the run's live state, and the
``snapshot.taken`` event that binds it to the log (see runtime.events._snapshots).

The live state is the fold of the log through the batch's events at the time of the call:
the snapshot is taken of it, after the taken event, which only counts in ``event_counts``.
"""

from __future__ import annotations

from eventstore import EventBody, SnapshotAfter, SnapshotTaken, event_tag

from ..events._snapshots import SNAPSHOT_AT_REST, snapshot_after, worth_at_rest
from ..events._state import RunState

__all__ = ["snapshot_due", "untake"]

_TAKEN = event_tag(SnapshotTaken)


def snapshot_due(
    state: RunState,
    batch: list[EventBody],
    events: int,
    at_rest: bool,
    *,
    since_seq: int,
    every: int,
    last_bytes: int,
) -> SnapshotAfter | None:
    """The live state as a snapshot after the first ``events`` of ``batch``, when due.

    ``state`` must be the fold of the log through that event. The ``snapshot.taken`` event
    is inserted into ``batch`` right after them, and the state's ``last_seq`` moves past it.
    Due ``every`` events after the last snapshot (at ``since_seq``); at rest, sooner when
    ``worth_at_rest`` (against the last one's ``last_bytes``). An unencodable state skips it.
    """
    at = state.last_seq
    since = at - since_seq
    due = min(every, SNAPSHOT_AT_REST) if at_rest else every
    if events == 0 or since < due:
        return None
    # The state through the taken event, which only counts in event_counts.
    state.last_seq = at + 1
    counts = state.event_counts
    counts[_TAKEN] = counts.get(_TAKEN, 0) + 1
    made = snapshot_after(state, events)
    if made is None or (since < every and not worth_at_rest(since, len(made[1].data), last_bytes)):
        untake(state, at)
        return None
    taken, snapshot = made
    batch.insert(events, taken)
    return snapshot


def untake(state: RunState, at: int) -> None:
    """Undo what :func:`snapshot_due` did to ``state`` (its event was not handed over)."""
    state.last_seq = at
    counts = state.event_counts
    counts[_TAKEN] -= 1
    if not counts[_TAKEN]:
        del counts[_TAKEN]
