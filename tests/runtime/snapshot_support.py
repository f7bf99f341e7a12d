"""Saving a snapshot in a test as a run's owner does: with the event that binds it."""

from __future__ import annotations

import msgspec

from eventstore import EventStore, Snapshot
from runtime.events import RunState
from runtime.events._snapshots import snapshot_after

__all__ = ["save_bound_snapshot"]


async def save_bound_snapshot(store: EventStore, state: RunState) -> Snapshot:
    """Append the ``snapshot.taken`` event of ``state`` (the fold of its run's whole log)
    after the log's last event, with the snapshot it binds; return the stored snapshot."""
    counts = dict(state.event_counts)
    counts["snapshot.taken"] = counts.get("snapshot.taken", 0) + 1
    # The state through the taken event: it only counts.
    through = msgspec.structs.replace(state, last_seq=state.last_seq + 1, event_counts=counts)
    made = snapshot_after(through, 0)
    assert made is not None
    taken, after = made
    await store.append(state.run_id, [taken], expected_seq=state.last_seq, snapshot=after)
    snapshot = await store.load_snapshot(state.run_id)
    assert snapshot is not None and snapshot.seq == through.last_seq
    return snapshot
