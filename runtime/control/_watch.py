"""Following runs from an app: one run's committed events as they come, and the status
changes of every run in a store (``RunHandle.events``, ``Runtime.watch_runs``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import msgspec

from eventstore import Event, EventBody, EventStore, event_tag

from .._result import RunOutcome
from .._run_logs import RunLogs
from ..events._catalogue import RunCancelled, RunFinished, RunPaused, RunResumed, RunStarted
from ..events._state import StateStatus
from ._own_run import check_not_own_run

__all__ = ["RunChange", "follow_run", "status_after", "watch_store"]

#: How often a follower looks for events committed by another process.
POLL_INTERVAL = 0.05


class RunChange(msgspec.Struct, frozen=True, kw_only=True):
    """A committed event of some run, as :meth:`runtime.Runtime.watch_runs` yields it.

    ``type`` is the event's tag (``"run.paused"``); ``status`` is the status the event
    leaves the run in, or None for an event that does not change it (only yielded with
    ``every_event=True``). ``position`` is the event's place in the store's commit order:
    ``watch_runs(after=position)`` continues after it.
    """

    run_id: str
    seq: int
    position: int
    type: str
    status: StateStatus | None


def status_after(body: EventBody) -> StateStatus | None:
    """The status an event leaves its run in, or None if it leaves it unchanged."""
    match body:
        case RunStarted() | RunResumed():
            return "running"
        case RunPaused():
            return "paused"
        case RunCancelled():
            return "cancelled"
        case RunFinished(status=status):
            return status
        case _:
            return None


async def follow_run(
    logs: RunLogs, run_id: str, from_seq: int, *, since: int, outcome: RunOutcome
) -> AsyncIterator[Event]:
    """The run's committed events from ``from_seq`` on, in seq order, as they commit.

    Ends after the first event past seq ``since`` (where this process launched the run)
    that ends or pauses it; or, when the run's executor here stopped without one (its
    claim lost, a store error), once everything committed is yielded. Refused at once in
    a node of the run (it would follow until the run's end, which waits for the node).
    """
    check_not_own_run(run_id, "read the events committed so far with Runtime.read_events")
    next_seq = max(from_seq, 1)
    while True:
        # Read after checking: whatever the executor committed before it stopped is read.
        stopped = outcome.done
        for event in await logs.read_events(run_id, from_seq=next_seq):
            yield event
            next_seq = event.seq + 1
            if event.seq > since and isinstance(event.body, (RunFinished, RunCancelled, RunPaused)):
                return
        if stopped:
            return
        with anyio.move_on_after(POLL_INTERVAL):
            await outcome.settled()


async def watch_store(
    store: EventStore, *, after: int | None, every_event: bool
) -> AsyncIterator[RunChange]:
    """Every run's status changes committed after store position ``after`` (the store's
    newest when None, taken when iteration starts), in commit order; see
    :meth:`runtime.Runtime.watch_runs`."""
    position = await store.head_position() if after is None else after
    async for event in store.tail(from_position=position):
        status = status_after(event.body)
        if status is not None or every_event:
            yield RunChange(
                run_id=event.run_id,
                seq=event.seq,
                position=event.position,
                type=event_tag(event.body),
                status=status,
            )
