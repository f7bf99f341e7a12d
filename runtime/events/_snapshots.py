"""Snapshots of a run's folded state: a derived cache that keeps reads from growing with the log.

A snapshot is the :class:`RunState` through event ``seq``, encoded, stored with the store's
snapshot storage and tagged with the chain hash of event ``seq`` and :data:`FOLD_VERSION`.
Event ``seq`` is the ``snapshot.taken`` the run's owner appended with it, holding the
digest of its bytes (see :mod:`eventstore._snapshot_event`; the fold gives that event no
meaning). A snapshot is never the source of truth:

- it is used only when its version is this fold's and the log's event at its seq binds
  its bytes, and the chain from that event to the run's head checks out (so a changed
  fold, an edited or inserted snapshot row, a rewritten log or another run's snapshot is
  ignored); the state is then the snapshot plus the fold of the events after it;
- otherwise the whole log is folded (a read saves no snapshot: only the run's owner can
  append the event that binds one);
- deleting every snapshot changes no result, only how long a read takes;
- :func:`check_snapshot` (what ``verify`` adds to the chain's check) folds the log again
  and compares.

:func:`load_state` is what ``Runtime.get_state`` and ``Runtime.resume`` read through. A
running run's log (``runtime.engine._runlog.RunLog``) hands the store a snapshot of its live state
(:func:`snapshot_after`) and its ``snapshot.taken`` event with its first batch after every
``SNAPSHOT_EVERY`` events, whichever way the batch goes (an awaited append, a write-behind
flush, a submit that does not wait): the store saves it in the batch's own transaction, so
a snapshot costs no write and no wait of its own. The batch that records a run's pause or
end carries one too, committed before the run's result is reported, when it is worth its
bytes (:func:`worth_at_rest`): ``SNAPSHOT_AT_REST`` events or more passed since the last,
and it adds at most ``SNAPSHOT_AT_REST_BYTES`` per such event to what the run's snapshot
takes in the store (a store keeps one per run: the new one replaces the last). A run at
rest is then read as a snapshot and a short tail. A run whose state is about as large as
its log (each step adds its payload to a memory list) gets none: the snapshot would double
what the run stores to spare a read folding fewer than ``SNAPSHOT_EVERY`` events, which a
read of a run that long does quickly; the periodic snapshot still bounds its reads. A
resumed run's log counts from the snapshot its state was read through and weighs one at
rest against it (:class:`SnapshotRead`), so a run paused every few hundred events gets its
snapshots as one that never pauses does.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from eventstore import Event, EventStore, SnapshotAfter, SnapshotTaken, binds, snapshot_digest

from ._state import RunState, fold

__all__ = [
    "FOLD_VERSION",
    "SNAPSHOT_AT_REST",
    "SNAPSHOT_AT_REST_BYTES",
    "SNAPSHOT_EVERY",
    "SnapshotOutcome",
    "SnapshotRead",
    "check_snapshot",
    "decode_state",
    "encode_state",
    "load_state",
    "snapshot_after",
    "worth_at_rest",
]

_log = logging.getLogger("magistrate.runtime")

#: Events between two snapshots of a run.
SNAPSHOT_EVERY = 1000

#: Events since its last snapshot from which a run that pauses or ends may get one with the
#: batch that records it (a run at rest is then read as that snapshot plus its few later
#: events; a shorter tail is folded faster than a snapshot is written and read).
SNAPSHOT_AT_REST = 100

#: Bytes a snapshot at rest may add to what the run's snapshot takes in the store, per event
#: since the last one (each a row a read need not fold). About what a small event takes in
#: the log: a snapshot at rest at most about doubles the storage of the tail it spares, and
#: a state as large as the log it folds (a memory list of each step's payload) gets none.
SNAPSHOT_AT_REST_BYTES = 128

# Bumped by hand when apply's meaning changes with RunState's shape unchanged, or when what
# makes a snapshot usable does (a revision's snapshots are all bound to a snapshot.taken
# event); a change of the shape changes the fingerprint by itself.
_APPLY_REVISION = 7  # 7: a node waiting to retry is running at its next attempt
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


def snapshot_after(state: RunState, events: int) -> tuple[SnapshotTaken, SnapshotAfter] | None:
    """``state`` as a snapshot for the store to save with a batch, and the event that binds
    it: the caller puts the ``snapshot.taken`` body right after the batch's first ``events``
    (of which ``state`` is the fold, through the taken event: ``state.last_seq`` is its
    seq). None when the state cannot be encoded (logged: a snapshot is only a cache). The
    snapshot's seq and hash are the store's to fill in."""
    try:
        data = encode_state(state)
    except (TypeError, OverflowError, ValueError) as exc:
        _log.debug("run %s: no snapshot at seq %d (%s)", state.run_id, state.last_seq, exc)
        return None
    taken = SnapshotTaken(digest=snapshot_digest(data), version=FOLD_VERSION)
    return taken, SnapshotAfter(events + 1, FOLD_VERSION, data)


def worth_at_rest(events: int, size: int, replaced: int) -> bool:
    """Whether a run coming to rest ``events`` events after its last snapshot gets one of
    ``size`` bytes with the batch that records it, ``replaced`` the size of the snapshot it
    replaces (0 when the run has none, or none its log knows of: a store keeps the newest
    snapshot of a run only). True when ``events >= SNAPSHOT_AT_REST`` and the snapshot adds
    at most ``SNAPSHOT_AT_REST_BYTES`` per event to the store: a long tail over a small
    state, or a state grown little since the snapshot it replaces."""
    return events >= SNAPSHOT_AT_REST and size - replaced <= events * SNAPSHOT_AT_REST_BYTES


#: How a read used the run's snapshot: hit (used), miss (none, or one past a time-travel
#: read's end), stale (ignored: another fold's version, a log it does not match, bad bytes).
SnapshotOutcome = Literal["hit", "miss", "stale"]


class SnapshotRead(msgspec.Struct, frozen=True):
    """The run's stored snapshot as a state read met it: what a log that goes on from the
    read counts its next snapshot from (``runtime.engine._runlog.RunLog``), so a run
    resumed again and again still gets one every ``SNAPSHOT_EVERY`` events, and one at
    rest is weighed against the snapshot it replaces."""

    #: The snapshot's event when the read went through it (the read folded only what
    #: follows); 0 when it folded the whole log.
    seq: int
    #: Bytes of the run's snapshot in the store, used or not (0: it has none): what its
    #: next one replaces.
    size: int


async def load_state(
    store: EventStore,
    run_id: str,
    *,
    to_seq: int | None = None,
    observe: Callable[[SnapshotOutcome], None] | None = None,
) -> tuple[RunState, list[Event], SnapshotRead]:
    """The run's state (up to ``to_seq``), the events folded onto the snapshot used, and
    what the read found of the run's snapshot.

    Reads the newest usable snapshot and the events after it; without one, the whole log
    (the events returned are then all of them). A snapshot is usable when it is this
    fold's, the log's event at its seq is the ``snapshot.taken`` that binds its bytes
    (:func:`eventstore.binds`) and, for a time-travel read, that event comes before
    ``to_seq``. What it folds is read with the hash chain checked from the snapshot's
    event on (a read that reaches the run's end must end where the run's record says), so
    an edited or cut log raises CorruptLogError naming the seq instead of folding into a
    wrong state, and a snapshot whose bytes or event were changed is ignored. A read saves
    no snapshot: only the run's owner can append the event that binds one. A state of a
    run with no events has ``last_seq == 0``. ``observe`` is told how the snapshot served
    the read (for metrics).
    """
    snapshot = await store.load_snapshot(run_id)
    outcome: SnapshotOutcome = "miss"
    if snapshot is not None and snapshot.version != FOLD_VERSION:
        outcome = "stale"
    elif snapshot is not None and (to_seq is None or snapshot.seq < to_seq):
        events = [
            e async for e in store.read(run_id, from_seq=snapshot.seq, to_seq=to_seq, verify=True)
        ]
        base = None
        if events and binds(
            events[0], snapshot.seq, snapshot.hash, snapshot.version, snapshot.data
        ):
            try:
                base = decode_state(snapshot.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                base = None
        if base is not None:
            if observe is not None:
                observe("hit")
            _envelope(base, events[0])
            tail = events[1:]
            return fold(tail, base), tail, SnapshotRead(snapshot.seq, len(snapshot.data))
        outcome = "stale"
        _log.warning(
            "run %s: its snapshot at seq %d is not bound to the log; it is ignored",
            run_id,
            snapshot.seq,
        )
    if observe is not None:
        observe(outcome)
    events = await store.read_all(run_id, to_seq=to_seq, verify=True)
    return fold(events), events, SnapshotRead(0, 0 if snapshot is None else len(snapshot.data))


def _envelope(state: RunState, event: Event) -> None:
    # A live state's snapshot was encoded before its event's hash was known: the envelope
    # fields are the event's.
    state.last_seq, state.last_hash, state.last_position = event.seq, event.hash, event.position


async def check_snapshot(
    store: EventStore, run_id: str, events: Sequence[Event] | None = None
) -> tuple[int, str] | None:
    """The run's snapshot checked against its log: None when it has none, it is another
    fold's (ignored by reads), or it is bound to the log and equals the fold of the log
    through its seq; else ``(seq, reason)``: a snapshot row that was edited, inserted or
    made by a wrong fold. Reads the log through the snapshot's seq, unless ``events`` (the
    run's, from its first) are given (raises the store's errors for a log that cannot be
    read)."""
    snapshot = await store.load_snapshot(run_id)
    if snapshot is None or snapshot.version != FOLD_VERSION:
        return None
    seq = snapshot.seq
    if events is None:
        events = await store.read_all(run_id, to_seq=seq)
    else:
        events = events[:seq]
    if len(events) < seq:
        return seq, f"a snapshot at seq {seq} is past the log's end (seq {len(events)})"
    if not binds(events[seq - 1], seq, snapshot.hash, snapshot.version, snapshot.data):
        return seq, (
            f"the snapshot at seq {seq} is not bound to the log (no snapshot.taken event "
            "with its hash and the digest of its bytes): it was edited or inserted"
        )
    try:
        held = decode_state(snapshot.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return seq, f"the snapshot at seq {seq} cannot be decoded: {exc}"
    _envelope(held, events[seq - 1])
    if held != fold(events):
        return seq, f"the snapshot at seq {seq} differs from the fold of the log through it"
    return None
