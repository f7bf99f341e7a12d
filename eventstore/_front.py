"""The front every store puts before its writer, and the writer seam behind it.

A store is a :class:`StoreFront` over one :class:`Writer` per backend (the SQLite store's
writer thread, the PostgreSQL store's writer task) plus the backend's own reads. The front
holds what does not depend on the database: the store's lifecycle state, the checks every
append starts with, queueing with backpressure and waiting for the commit, the
non-waiting ``submit``, the writer's statistics, and waking the followers of ``tail``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar

import anyio

from ._errors import ConcurrencyError, StoreClosedError
from ._events import Event, EventBody
from ._followers import Followers, Head, TailChunk
from ._heads import HeadsFile
from ._protocol import AppendResult, SnapshotAfter, StoreStatistics
from ._requests import AppendRequest, Pending
from ._snapshot_event import SnapshotTaken, snapshot_digest

__all__ = ["CommitCounters", "Prepare", "State", "StoreFront", "Writer"]

#: new -> opening -> open -> closing -> closed (a failed open goes back to new or to closed).
State = Literal["new", "opening", "open", "closing", "closed"]

#: Encodes a checked batch into the backend's request (raising for what it cannot store).
Prepare = Callable[[str, Sequence[EventBody], "int | None", "SnapshotAfter | None"], AppendRequest]


class Writer(Protocol):
    """Who commits a store's appends. Used on the event loop's thread only.

    ``submit`` queues an encoded request without waiting; the writer answers it (fills its
    ``result`` or ``error`` and calls :meth:`AppendRequest.finish`) on the event loop once
    its transaction committed or failed, in the order requests were submitted for each run.
    """

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request``; False (nothing queued) when the writer is full and ``request``
        is a run's first append or an unchecked one (``expected_seq`` 0 or None): a run's
        next append is always queued, so backpressure falls on new runs.

        Raises StoreClosedError once :meth:`close` has begun.
        """
        ...

    async def wait_for_space(self) -> None:
        """Return when a submit may succeed again (a slot was freed, or the writer closed)."""
        ...

    async def close(self) -> None:
        """Commit and answer everything submitted so far, then stop; fail what cannot be."""
        ...

    def statistics(self) -> StoreStatistics:
        """Counters since the writer started."""
        ...


W = TypeVar("W", bound=Writer)

_NO_STATISTICS = StoreStatistics(
    appends=0, events=0, batches=0, mean_batch_size=0.0, max_batch_size=0, commit_seconds_total=0.0
)


class StoreFront(Generic[W]):
    """The backend-neutral half of a store: its state, its writer ``W`` and its followers.

    ``prepare`` encodes a batch that passed the common checks (the backend adds its own,
    such as PostgreSQL's refusal of NUL characters in text).
    """

    __slots__ = ("_followers", "_prepare", "heads", "state", "wake_followers", "writer")

    def __init__(self, prepare: Prepare, heads: HeadsFile | None = None) -> None:
        self.state: State = "new"
        #: The store's heads file (see eventstore._heads), closed with the store.
        self.heads = heads
        #: Set by :meth:`open`; kept after close (its statistics stay readable).
        self.writer: W | None = None
        self._prepare = prepare
        self._followers = Followers(self._is_live)
        #: Wake every follower waiting in :meth:`follow` (at a commit, or at close): the
        #: followers' own method, called once a commit (no call of ours around it).
        self.wake_followers: Callable[[], None] = self._followers.wake

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self, start: Callable[[], Awaitable[W]], *, on_failure: State) -> None:
        """Run ``start`` (connect, check the schema, start the writer) and go open.

        Raises StoreClosedError if the store was opened before; whatever ``start`` raises,
        after going to ``on_failure`` (``start`` releases what it took).
        """
        if self.state != "new":
            raise StoreClosedError("open", f"the store is {self.state}; open it only once")
        self.state = "opening"
        try:
            writer = await start()
        except BaseException:
            self.state = on_failure
            raise
        self.writer = writer
        self.state = "open"

    async def close(self, release: Callable[[], Awaitable[None]]) -> None:
        """Close the writer (it commits and answers what it holds), then ``release`` the
        backend's connections; idempotent. Appends that arrive once closing began raise
        StoreClosedError. Shielded from cancellation. Followers end."""
        if self.state in ("closing", "closed"):
            return
        if self.state == "new":
            self.state = "closed"
            return
        self.state = "closing"
        with anyio.CancelScope(shield=True):
            if self.writer is not None:
                await self.writer.close()
            await release()
            if self.heads is not None:
                await anyio.to_thread.run_sync(self.heads.close)
        self.state = "closed"
        self.wake_followers()

    def check_open(self, operation: str) -> None:
        """Raise StoreClosedError unless the store is open."""
        if self.state != "open":
            raise StoreClosedError(operation)

    def check_readable(self, operation: str) -> None:
        """Raise StoreClosedError unless the store is open or closing (reads still served)."""
        if self.state != "open" and self.state != "closing":
            raise StoreClosedError(operation)

    def open_writer(self, operation: str) -> W:
        """The writer of an open store; StoreClosedError otherwise."""
        writer = self.writer
        if self.state != "open" or writer is None:
            raise StoreClosedError(operation)
        return writer

    # -- writing ---------------------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        events: Sequence[EventBody],
        expected_seq: int | None,
        snapshot: SnapshotAfter | None,
    ) -> AppendResult:
        """See :meth:`SqliteEventStore.append`."""
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        while not writer.submit(request):
            await writer.wait_for_space()  # backpressure: the writer is full
            if self.state != "open":
                raise StoreClosedError("append")
        await request.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def submit(
        self,
        run_id: str,
        events: Sequence[EventBody],
        expected_seq: int | None,
        snapshot: SnapshotAfter | None,
        on_done: Callable[[AppendResult | None, BaseException | None], None],
    ) -> bool:
        """See :meth:`SqliteEventStore.submit`."""
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        request.on_done = on_done
        return writer.submit(request)

    def _request(
        self,
        run_id: str,
        events: Sequence[EventBody],
        expected_seq: int | None,
        snapshot: SnapshotAfter | None,
    ) -> tuple[W, AppendRequest]:
        """The checks every append starts with, then the encoded request (not yet queued)."""
        writer = self.open_writer("append")
        if not events:
            raise ValueError("append needs at least one event")
        if snapshot is not None:
            _check_snapshot(events, snapshot)
        return writer, self._prepare(run_id, events, expected_seq, snapshot)

    def statistics(self) -> StoreStatistics:
        """The writer's counters since open (zeros before it)."""
        return _NO_STATISTICS if self.writer is None else self.writer.statistics()

    # -- following -------------------------------------------------------------------------

    def follow(
        self, chunk: TailChunk, head: Head, from_position: int, poll_interval: float
    ) -> AsyncIterator[Event]:
        """Yield the events after ``from_position`` chunk by chunk, then wait for the next
        commit (:meth:`wake_followers`) or for a poll of ``head`` (one for every follower
        of the store, each ``poll_interval`` seconds) to pass the last position yielded;
        end when the store closes. See eventstore._followers."""
        return self._followers.follow(chunk, head, from_position, poll_interval)

    def _is_live(self) -> bool:
        return self.state == "open" or self.state == "closing"


def _check_snapshot(events: Sequence[EventBody], snapshot: SnapshotAfter) -> None:
    """Refuse a snapshot that names no event of the batch, or whose event is not the
    ``snapshot.taken`` binding it (an unbound row would be ignored by every load)."""
    if not 1 <= snapshot.events <= len(events):
        raise ValueError(f"a snapshot after {snapshot.events} of {len(events)} events")
    taken = events[snapshot.events - 1]
    if not (
        isinstance(taken, SnapshotTaken)
        and taken.version == snapshot.version
        and taken.digest == snapshot_digest(snapshot.data)
    ):
        raise ValueError(
            f"a snapshot's event (the batch's event {snapshot.events}) must be the "
            "snapshot.taken naming its version and the digest of its bytes"
        )


class CommitCounters:
    """What a store's writer counts of its group commits, read as :class:`StoreStatistics`."""

    __slots__ = (
        "appends",
        "batch_sizes",
        "batches",
        "commit_seconds",
        "conflicts",
        "events",
        "max_batch",
    )

    def __init__(self) -> None:
        self.appends = 0
        self.events = 0
        self.batches = 0
        self.max_batch = 0
        self.conflicts = 0
        self.commit_seconds = 0.0
        self.batch_sizes = [0] * (len(StoreStatistics.BATCH_SIZE_BOUNDS) + 1)

    def record(self, batch: Iterable[Pending[Any]], seconds: float) -> None:
        """Count one committed transaction of ``batch`` (its appends: the events they wrote
        and those refused with ConcurrencyError; ownership requests count nothing), which
        took ``seconds``. A transaction without appends (ownership requests alone) is not
        a group commit of appends and counts nothing."""
        appends = events = conflicts = 0
        for request in batch:
            if type(request) is not AppendRequest:
                continue
            appends += 1
            error = request.error
            if error is None:
                events += len(request.bodies)
            elif type(error) is ConcurrencyError:
                conflicts += 1
        if not appends:
            return
        self.batches += 1
        self.appends += appends
        self.events += events
        self.conflicts += conflicts
        if appends > self.max_batch:
            self.max_batch = appends
        self.commit_seconds += seconds
        self.batch_sizes[StoreStatistics.batch_size_bucket(appends)] += 1

    def statistics(self, *, queued: int) -> StoreStatistics:
        return StoreStatistics(
            appends=self.appends,
            events=self.events,
            batches=self.batches,
            mean_batch_size=self.appends / self.batches if self.batches else 0.0,
            max_batch_size=self.max_batch,
            commit_seconds_total=self.commit_seconds,
            conflicts=self.conflicts,
            queued=queued,
            batch_size_counts=tuple(self.batch_sizes),
        )
