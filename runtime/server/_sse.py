"""Server-sent event streams: one run's events (the store's ``tail``), and run changes
(``Runtime.watch_runs``).

Both streams are read-only. A client that reconnects sends ``Last-Event-ID`` (or
``?after=``) and gets only what it missed: a run's stream numbers its messages by seq.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from eventstore import EventStore

from .. import Runtime
from ..reads import EventRecord

__all__ = ["run_changes", "run_events"]

_ENCODER = msgspec.json.Encoder()


def _message(event: str, data: bytes, id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + data + b"\n\n"


async def run_events(store: EventStore, run_id: str, after: int) -> AsyncIterator[bytes]:
    """The run's events with ``seq > after`` as they are in the log, then live ones.

    Reads the stored events first, then follows the store's tail from the last position
    read (from the store's head before the read, when it read none: never from the start
    of the store), so nothing committed in between is lost and nothing is sent twice.
    """
    yield b": stream of run " + run_id.encode() + b"\n\n"
    position = await store.head_position()  # nothing of the run after it: all read below
    last_seq = after
    async for event in store.read(run_id, from_seq=after + 1):
        position, last_seq = event.position, event.seq
        yield _message("event", _ENCODER.encode(EventRecord.of(event)), event.seq)
    async for event in store.tail(from_position=position):
        if event.run_id == run_id and event.seq > last_seq:
            last_seq = event.seq
            yield _message("event", _ENCODER.encode(EventRecord.of(event)), event.seq)


class _Change(msgspec.Struct, frozen=True):
    run_id: str
    seq: int
    type: str


async def run_changes(runtime: Runtime, position: int) -> AsyncIterator[bytes]:
    """A ``run`` message (run id, seq, event type) for every event after store
    ``position`` (``Runtime.watch_runs`` with every event)."""
    yield b": stream of run changes\n\n"
    async for change in runtime.watch_runs(after=position, every_event=True):
        yield _message("run", _ENCODER.encode(_Change(change.run_id, change.seq, change.type)))
