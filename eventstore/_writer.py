"""The SQLite store's writer: one thread that group-commits.

A store hands every append to one writer (eventstore._front.Writer). The SQLite store's is
a :class:`ThreadWriter`: a plain thread that owns the write connection and, whenever it is
free, takes what is queued at that moment (at most ``max_batch`` appends, and at most half
of the appends in flight) into ONE write transaction, so a batch costs one fsync and one
hand-back to the event loop whatever its size. While a batch commits the next one gathers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import cast

from ._core import WriterCore
from ._errors import StoreClosedError, StoreError, StoreFileError
from ._front import CommitCounters
from ._protocol import StoreStatistics
from ._requests import AppendRequest
from ._schema import describe
from ._sqlite_turn import OwnershipRequest, Request

__all__ = ["ThreadWriter"]


class ThreadWriter:
    """The writer of a SQLite store: one thread owning the write connection.

    Besides appends it takes the store's ownership requests (claims, renewals, releases;
    see eventstore._sqlite_claims) into the same queue and the same transactions, and
    holds a claim given to :meth:`hold` until its run's next append, which it queues just
    before (so both go in one transaction). An ownership request is queued even when the
    appends fill the queue (a renewal never waits behind their backpressure).
    Backpressure falls on new runs: only a run's first append (``expected_seq`` 0 or None)
    is refused while ``capacity`` appends are in flight. A run going holds its state and a
    bounded number of appends whether they wait or are queued, and waiting would add a task
    and its coroutines to each; new runs are what callers can make faster than commits.
    ``on_commit`` is called on the event loop after each committed batch (the store wakes
    the followers of :meth:`SqliteEventStore.tail` with it). Waiting for space wakes one
    waiter per freed slot, in the order they began to wait.
    """

    def __init__(
        self,
        core: WriterCore,
        max_batch: int,
        capacity: int,
        on_commit: Callable[[], None],
    ) -> None:
        self._core = core
        self._max_batch = max_batch
        self._capacity = capacity
        self._on_commit = on_commit
        # Put by the loop, taken by the thread (the thread blocks in it with the GIL
        # released). None asks the thread to commit what it took and stop.
        self._queue: SimpleQueue[Request | None] = SimpleQueue()
        self._in_flight = 0  # submitted and not yet answered (changed on the loop only)
        self._closing = False
        # Callers of wait_for_space, oldest first; and how many were woken and have not
        # come back to submit yet (their slots are spoken for).
        self._space_waiters: deque[asyncio.Future[None]] = deque()
        self._woken = 0
        # Outcomes the thread finished, for _deliver on the loop: (batch, error, seconds).
        # Appended by the thread, taken by the loop (deque ends are atomic).
        self._answers: deque[tuple[list[Request], StoreError | None, float]] = deque()
        self._wake_pending = False
        self._loop = asyncio.get_running_loop()
        self._stopped: asyncio.Future[None] = self._loop.create_future()
        self._counters = CommitCounters()
        # Claims held until their run's next append (see hold), and releases (hold_release).
        self._held: dict[str, OwnershipRequest] = {}
        self._releases: dict[str, OwnershipRequest] = {}
        self._thread = threading.Thread(
            target=self._run, name=f"eventstore-writer:{core.path}", daemon=True
        )
        self._thread.start()

    # -- the event loop's side -------------------------------------------------------------

    def submit(self, request: Request) -> bool:
        if self._closing:
            raise StoreClosedError("append")
        if self._answers:
            self._deliver()  # batches the thread finished while the loop was busy
        if type(request) is AppendRequest:
            first = not request.expected_seq
            # Backpressure falls on new runs (see the class docstring): an ownership
            # request (a renewal) never waits behind appends, nor does a run's next append.
            if first and self._in_flight + self._woken >= self._capacity:
                return False
            if self._held:
                held = self._held.pop(request.run_id, None)
                if held is not None:
                    if first and self._in_flight + self._woken + 1 >= self._capacity:
                        self._held[request.run_id] = held  # room for both, or neither
                        return False
                    self._in_flight += 1
                    self._queue.put(held)
            if self._releases:
                release = self._releases.pop(request.run_id, None)
                if release is not None:
                    if release.with_append == request.expected_seq:
                        request.release = release  # taken into the batch with it
                        self._in_flight += 1
                    else:
                        release.fail(_not_with(request.run_id))
        elif self._releases and cast(OwnershipRequest, request).operation == "release":
            run_id = cast(OwnershipRequest, request).claims[0].run_id
            release = self._releases.pop(run_id, None)
            if release is not None:  # given up on its own instead
                release.fail(_not_with(run_id))
        self._in_flight += 1
        self._queue.put(request)
        return True

    def hold(self, request: OwnershipRequest) -> None:
        """Hold a claim until the next :meth:`submit` of an append to its run, then queue it
        just before that append (replacing a claim held for the run before). Raises
        StoreClosedError once :meth:`close` has begun."""
        if self._closing:
            raise StoreClosedError("claim")
        self._held[request.run_id] = request

    def hold_release(self, request: OwnershipRequest) -> None:
        """Hold a release (``with_append`` set) until the next :meth:`submit` of an append
        to its run: that append carries it if it is at the expected seq ``with_append``,
        else it is answered with an error (as it is when a plain release of the run is
        submitted first); a release held for the run before is replaced. Raises
        StoreClosedError once :meth:`close` has begun."""
        if self._closing:
            raise StoreClosedError("release")
        run_id = request.claims[0].run_id
        replaced = self._releases.get(run_id)
        self._releases[run_id] = request
        if replaced is not None:
            replaced.fail(_not_with(run_id))

    async def wait_for_space(self) -> None:
        if self._closing:
            return
        waiter = self._loop.create_future()
        self._space_waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._pass_on_slot()  # woken, then cancelled: the slot goes to the next
            else:
                self._space_waiters.remove(waiter)
            raise
        self._woken -= 1

    def has_room(self) -> bool:
        """Whether :meth:`wait_for_room` would return at once (no coroutine to await)."""
        return self._closing or self._in_flight + self._woken + 1 < self._capacity

    async def wait_for_room(self) -> None:
        """Return once a new run's first append, with a claim held for it, would be taken
        (at once if so now, or once the writer closes)."""
        while not self._closing and self._in_flight + self._woken + 1 >= self._capacity:
            await self.wait_for_space()

    def _pass_on_slot(self) -> None:
        self._woken -= 1
        self._wake_waiters(1)

    def _wake_waiters(self, slots: int) -> None:
        waiters = self._space_waiters
        while slots > 0 and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._woken += 1
                slots -= 1

    async def close(self) -> None:
        if self._closing:
            await asyncio.shield(self._stopped)
            return
        self._closing = True
        held, self._held = self._held, {}
        held.update(self._releases)
        self._releases = {}
        for claim in held.values():
            claim.fail(StoreClosedError(claim.operation, "the store closed before the append"))
        self._queue.put(None)
        await asyncio.shield(self._stopped)
        self._deliver()
        closed = StoreClosedError("append", "the store closed before it was written")
        while True:  # never taken by the thread (it stopped early): never written
            try:
                request = self._queue.get_nowait()
            except Empty:
                break
            if request is not None:
                self._in_flight -= 1
                request.fail(closed)
                if type(request) is AppendRequest and request.release is not None:
                    self._in_flight -= 1
                    request.release.fail(closed)
        for waiter in self._space_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._space_waiters.clear()

    def statistics(self) -> StoreStatistics:
        return self._counters.statistics(queued=self._queue.qsize())

    def _deliver(self) -> None:
        """Hand the outcomes of every batch the thread has finished to their callers."""
        self._wake_pending = False  # before draining: a later answer schedules a new wake
        answers = self._answers
        freed = 0
        committed = False
        while answers:
            batch, error, seconds = answers.popleft()
            freed += len(batch)
            self._in_flight -= len(batch)
            if error is not None:
                for request in batch:
                    request.fail(error)
                continue
            committed = True
            self._counters.record(batch, seconds)
            for request in batch:
                request.finish()
        if freed and self._space_waiters:
            self._wake_waiters(min(freed, self._capacity - self._in_flight - self._woken))
        fence = self._core.fence
        while fence.confirmed:  # leases the batches' appends extended (watch_leases)
            claims, since = fence.confirmed.popleft()
            for watcher in fence.watchers:
                watcher(claims, since)
        if committed:
            self._on_commit()

    def _finished(self) -> None:
        if not self._stopped.done():
            self._stopped.set_result(None)

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop_batches()
        finally:
            try:
                self._loop.call_soon_threadsafe(self._finished)
            except RuntimeError:
                pass  # the event loop is closed: nobody is waiting any more

    def _loop_batches(self) -> None:
        get, get_nowait, core = self._queue.get, self._queue.get_nowait, self._core
        while True:
            first = get()
            if first is None:
                return
            # At most half of the appends in flight: their callers then form two groups
            # that take turns, one group's batch committing while the event loop serves the
            # other's callers, instead of all callers waiting on one batch and the thread
            # idling while the loop serves them all. Ownership requests ride along
            # uncounted: a claim held for a run's first append is queued just before it
            # and goes in its transaction.
            limit = min(self._max_batch, (self._in_flight + 1) // 2)
            batch: list[Request] = []
            appends = 0
            if type(first) is AppendRequest:
                appends = 1
                if first.release is not None:  # answered before it: see release_after
                    batch.append(cast(OwnershipRequest, first.release))
            batch.append(first)
            stop = False
            while appends < limit:
                try:
                    request = get_nowait()
                except Empty:
                    break
                if request is None:
                    stop = True  # commit what was taken, then stop
                    break
                if type(request) is AppendRequest:
                    appends += 1
                    if request.release is not None:
                        batch.append(cast(OwnershipRequest, request.release))
                batch.append(request)
            error: StoreError | None = None
            started = time.perf_counter()
            try:
                core.commit(batch)
            except StoreError as exc:
                error = exc
            except Exception as exc:
                # sqlite3 errors, and anything unforeseen: every waiter of the batch
                # learns it failed, and the thread goes on with the next batch.
                error = _failed(core.path, exc, core.read_only)
            self._answers.append((batch, error, time.perf_counter() - started))
            # Blocked in get() next: hold nothing of this batch there (its requests, their
            # lists and callbacks are the loop's to answer and let go of).
            del batch
            first = request = error = None
            self._wake_loop()
            if stop:
                return

    def _wake_loop(self) -> None:
        # Wake the loop for the answers unless a wake-up is already due (the loop is
        # behind: that one, or the next submit on the loop, takes these too).
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:
            pass  # the event loop is closed: nobody is waiting any more


def _failed(path: str, exc: Exception, read_only: str | None = None) -> StoreError:
    """What a batch that raised ``exc`` fails with: StoreFileError for a file that cannot be
    written at all (read-only, or ``read_only``: why the store reads its file as it is; it
    says so, and nothing of the batch was written); else StoreError, with what SQLite's
    refusal means for the file where that can be told (a full disk, a size limit)."""
    if getattr(exc, "sqlite_errorname", None) == "SQLITE_READONLY":
        if read_only is None:
            reason = f"the file is read-only ({exc})"
        else:
            reason = f"{read_only}, so it was opened for reading only"
        error: StoreError = StoreFileError(path, reason, "write to")
    elif isinstance(exc, sqlite3.Error):
        error = StoreError(f"{path}: append failed: {describe(path, exc)}")
    else:
        error = StoreError(f"{path}: append failed: {exc}")
    error.__cause__ = exc
    return error


def _not_with(run_id: str) -> StoreError:
    return StoreError(f"run {run_id}: the release held for its append went without it")
