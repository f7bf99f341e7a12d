"""Server-sent event streams fed by the store's ``tail``: one run's events, and run changes.

Both streams are read-only. A client that reconnects sends ``Last-Event-ID`` (or
``?after=``) and gets only what it missed: a run's stream numbers its messages by seq.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from eventstore import Event, EventStore, RunInfo, event_tag

from ..reads import EventRecord

__all__ = ["head_position", "run_changes", "run_events"]

_ENCODER = msgspec.json.Encoder()


def _message(event: str, data: bytes, id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + data + b"\n\n"


async def run_events(store: EventStore, run_id: str, after: int) -> AsyncIterator[bytes]:
    """The run's events with ``seq > after`` as they are in the log, then live ones.

    Reads the stored events first, then follows the store's tail from the last position
    read, so nothing committed in between is lost and nothing is sent twice.
    """
    yield b": stream of run " + run_id.encode() + b"\n\n"
    position = 0
    last_seq = after
    async for event in store.read(run_id, from_seq=after + 1):
        position, last_seq = event.position, event.seq
        yield _message("event", _ENCODER.encode(EventRecord.of(event)), event.seq)
    if position == 0 and after > 0:
        async for event in store.read(run_id, from_seq=after, to_seq=after):
            position = event.position
    async for event in store.tail(from_position=position):
        if event.run_id == run_id and event.seq > last_seq:
            last_seq = event.seq
            yield _message("event", _ENCODER.encode(EventRecord.of(event)), event.seq)


class _Change(msgspec.Struct, frozen=True):
    run_id: str
    seq: int
    type: str


async def head_position(store: EventStore) -> int:
    """A store position at or below the newest one: where a change stream starts."""
    # No store call gives the newest position; the newest runs' last events bound it from
    # below, and starting a little early only repeats a few changes the client ignores.
    head = 0
    runs: list[RunInfo] = await store.list_runs(limit=20)
    for info in runs:
        if info.last_seq:
            async for event in store.read(info.run_id, from_seq=info.last_seq):
                head = max(head, event.position)
    return head


async def run_changes(store: EventStore, position: int) -> AsyncIterator[bytes]:
    """A ``run`` message (run id, seq, event type) for every event after ``position``."""
    yield b": stream of run changes\n\n"
    event: Event
    async for event in store.tail(from_position=position):
        change = _Change(event.run_id, event.seq, event_tag(event.body))
        yield _message("run", _ENCODER.encode(change))
