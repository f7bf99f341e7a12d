"""Snapshots of a run's folded state: a derived cache that keeps reads from growing with the log.

A snapshot is the :class:`RunState` after event ``seq``, encoded, stored with the store's
snapshot storage (``save_snapshot`` / ``load_snapshot``) and tagged with the chain hash of
event ``seq`` and :data:`FOLD_VERSION`. It is never the source of truth:

- a snapshot is used only when its version is this fold's and the log's event at its seq
  still has its hash (so a changed fold, a rewritten log or another run's snapshot is
  ignored); the state is then the snapshot plus the fold of the events after it;
- otherwise the whole log is folded, and a fresh snapshot is saved;
- deleting every snapshot changes no result, only how long a read takes.

:func:`load_state` is what ``Runtime.get_state`` and ``Runtime.resume`` read through. A
running run's log (``runtime.engine._runlog.RunLog``) hands the store a snapshot of its live state
(:func:`snapshot_after`) with its first batch after every ``SNAPSHOT_EVERY`` events,
whichever way the batch goes (an awaited append, a write-behind flush, a submit that does
not wait): the store saves it in the batch's own transaction, so a snapshot costs no
write and no wait of its own.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Literal

import msgspec

from eventstore import Event, EventStore, Snapshot, SnapshotAfter, StoreError

from ._state import RunState, fold

__all__ = [
    "FOLD_VERSION",
    "SNAPSHOT_EVERY",
    "SnapshotOutcome",
    "decode_state",
    "encode_state",
    "load_state",
    "snapshot_after",
]

_log = logging.getLogger("magistrate.runtime")

#: Events between two snapshots of a run.
SNAPSHOT_EVERY = 1000

# Bumped by hand when apply's meaning changes with RunState's shape unchanged; a change of
# the shape changes the fingerprint by itself.
_APPLY_REVISION = 2
_SHAPE = msgspec.json.encode(msgspec.json.schema(RunState))

#: Names the fold that made a snapshot: a snapshot made by another is ignored.
FOLD_VERSION = f"{_APPLY_REVISION}.{hashlib.sha256(_SHAPE).hexdigest()[:16]}"

# JSON, as the log's bodies are: a live state's values then read back exactly as the fold
# of the log reads them (a tuple as a list, ...), so a snapshot of a live state is the fold.
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(RunState)


def encode_state(state: RunState) -> bytes:
    """The snapshot bytes of ``state`` (JSON, encoded as event bodies are). Raises
    TypeError / ValueError for a memory value that cannot be encoded (then no snapshot)."""
    return _ENCODER.encode(state)


def decode_state(data: bytes) -> RunState:
    """The state in snapshot bytes (raises msgspec.DecodeError / ValidationError)."""
    state: RunState = _DECODER.decode(data)
    return state


def snapshot_after(state: RunState, events: int) -> SnapshotAfter | None:
    """``state`` (the fold of a log through the first ``events`` of the batch it goes with)
    as a snapshot for the store to save with that batch; None when it cannot be encoded
    (logged: a snapshot is only a cache). Its seq and hash are the store's to fill in."""
    try:
        data = encode_state(state)
    except (TypeError, OverflowError, ValueError) as exc:
        _log.debug("run %s: no snapshot at seq %d (%s)", state.run_id, state.last_seq, exc)
        return None
    return SnapshotAfter(events, FOLD_VERSION, data)


async def save_state(store: EventStore, state: RunState) -> bool:
    """Save ``state`` (a fold of the committed log) as the run's snapshot; False when it
    cannot be encoded or the store refused it (logged: a snapshot is only a cache)."""
    if state.last_seq == 0 or not state.last_hash:
        return False
    try:
        data = encode_state(state)
    except (TypeError, OverflowError, ValueError) as exc:
        _log.debug("run %s: no snapshot at seq %d (%s)", state.run_id, state.last_seq, exc)
        return False
    try:
        await store.save_snapshot(
            Snapshot(state.run_id, state.last_seq, state.last_hash, FOLD_VERSION, data)
        )
    except StoreError as exc:
        _log.warning("run %s: saving a snapshot failed (%s)", state.run_id, exc)
        return False
    return True


#: How a read used the run's snapshot: hit (used), miss (none, or one past a time-travel
#: read's end), stale (ignored: another fold's version, a log it does not match, bad bytes).
SnapshotOutcome = Literal["hit", "miss", "stale"]


async def load_state(
    store: EventStore,
    run_id: str,
    *,
    to_seq: int | None = None,
    every: int = SNAPSHOT_EVERY,
    observe: Callable[[SnapshotOutcome], None] | None = None,
) -> tuple[RunState, list[Event]]:
    """The run's state (up to ``to_seq``) and the events folded onto the snapshot used.

    Reads the newest usable snapshot and the events after it; without one, the whole log
    (the events returned are then all of them). What it folds is read with the hash chain
    checked (a read that reaches the run's end must end where the run's record says), so an
    edited or cut log raises CorruptLogError naming the seq instead of folding into a
    wrong state. Saves a new snapshot when ``every`` or more
    events were folded past the last one (not for a time-travel read). A state of a run
    with no events has ``last_seq == 0``. ``observe`` is told how the snapshot served the
    read (for metrics).
    """
    snapshot = await store.load_snapshot(run_id)
    outcome: SnapshotOutcome = "miss"
    if snapshot is not None and snapshot.version != FOLD_VERSION:
        outcome = "stale"
    elif snapshot is not None and (to_seq is None or snapshot.seq <= to_seq):
        # From the snapshot's own event: its hash ties the snapshot to this log.
        events = [
            e async for e in store.read(run_id, from_seq=snapshot.seq, to_seq=to_seq, verify=True)
        ]
        base = None
        if events and events[0].seq == snapshot.seq and events[0].hash == snapshot.hash:
            try:
                base = decode_state(snapshot.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                base = None
        if base is not None:
            if observe is not None:
                observe("hit")
            # A live state's snapshot was encoded before its hash was known: the envelope
            # fields are the snapshot's event's.
            first = events[0]
            base.last_seq, base.last_hash, base.last_position = (
                first.seq,
                first.hash,
                first.position,
            )
            tail = events[1:]
            state = fold(tail, base)
            if to_seq is None and len(tail) >= every:
                await save_state(store, state)
            return state, tail
        outcome = "stale"
        _log.info("run %s: its snapshot at seq %d does not match the log", run_id, snapshot.seq)
    if observe is not None:
        observe(outcome)
    events = await store.read_all(run_id, to_seq=to_seq, verify=True)
    state = fold(events)
    if to_seq is None and len(events) >= every:
        await save_state(store, state)
    return state, events
