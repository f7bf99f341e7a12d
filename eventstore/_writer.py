"""The single writer of a SQLite store: an actor whose thread group-commits appends.

Every append goes through one :class:`WriterActor`. Its thread owns the write connection
and, whenever it is free, takes what is queued at that moment (at most ``max_batch``
requests, and at most half of the appends in flight) into ONE write transaction (one
autocommit INSERT, or ``BEGIN IMMEDIATE`` ... ``COMMIT`` when runs rows change too), so a
batch costs one fsync and one hand-back to the event loop, whatever its size. While a batch
commits the next one gathers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

import anyio

from actors import Actor, Message

from ._core import WriterCore
from ._errors import StoreClosedError, StoreError
from ._requests import AppendRequest

if TYPE_CHECKING:
    from ._sqlite import SqliteEventStore

__all__ = ["WriterActor"]


class _Drain(Message, frozen=True, tag="eventstore.drain"):
    request: Any  # an AppendRequest with no events, finished once everything before it is


class WriterActor(Actor):
    """Owns the write connection's thread and commits append requests in groups.

    Appenders put requests in the writer's queue (:meth:`submit`, bounded: the caller waits
    for space). The writer's own thread takes what is queued whenever it is free (at most
    ``max_batch`` requests, and at most half of those in flight), commits it as ONE
    transaction, and queues the outcomes for the event loop, which hands them out from a
    wake-up the thread schedules (one at a time) or at its next append. So while a
    batch commits, the next one gathers, and the thread never waits for the event loop to
    hand it work. After a :class:`_Drain` message the writer refuses new appends and answers
    the drain once everything queued before it is committed, so closing never leaves an
    acknowledged append unwritten.
    """

    def __init__(
        self, store: SqliteEventStore, core: WriterCore, max_batch: int, capacity: int
    ) -> None:
        self._store = store
        self._core = core
        self._max_batch = max_batch
        self._capacity = capacity
        # Put by the loop, taken by the thread (a C queue: putting costs no lock dance in
        # Python, and the thread blocks in it with the GIL released). None wakes the thread
        # to stop.
        self._queue: SimpleQueue[AppendRequest | None] = SimpleQueue()
        self._in_flight = 0  # submitted and not yet answered (changed on the loop only)
        self._stopping = False
        self._space = anyio.Event()
        self._space_waiters = 0
        # Outcomes the thread finished, for deliver() on the loop: (batch, writes, error,
        # seconds). Appended by the thread, taken by the loop (deque ends are atomic).
        self._answers: deque[
            tuple[list[AppendRequest], list[AppendRequest], StoreError | None, float]
        ] = deque()
        self._wake_pending = False
        self._draining = False
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._run, name=f"eventstore-writer:{core.path}", daemon=True
        )
        self._thread.start()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request`` without waiting; False if the queue is full (see wait_for_space).

        Raises StoreClosedError once the writer drains for close or has stopped.
        """
        if self._draining or self.ref.stopped:
            raise StoreClosedError("append")
        if self._queue.qsize() >= self._capacity:
            return False
        self._in_flight += 1
        self._queue.put(request)
        return True

    def collect(self) -> None:
        """Hand out the answers of batches the thread finished (from every append: a busy
        loop collects them without being woken for them)."""
        if self._answers:
            self.deliver()

    async def wait_for_space(self) -> None:
        """Wait until the writer next answers a batch."""
        self._space_waiters += 1
        await self._space.wait()

    async def receive(self, message: Any) -> None:
        if isinstance(message, _Drain):
            self._draining = True
            self._in_flight += 1
            self._queue.put(message.request)

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        get, get_nowait, core, max_batch = (
            self._queue.get,
            self._queue.get_nowait,
            self._core,
            self._max_batch,
        )
        while True:
            first = get()
            if first is None or self._stopping:
                return  # on_stop fails whatever is still queued
            # At most half of the requests in flight: their callers then form two groups
            # that take turns, one group's batch committing while the event loop serves the
            # other's callers, instead of all callers waiting on one batch and the thread
            # idling while the loop serves them all (measured: 15-20% more events/s with
            # 200 appenders, 9% with 10).
            limit = min(max_batch, (self._in_flight + 1) // 2)
            batch = [first]
            while len(batch) < limit:
                try:
                    request = get_nowait()
                except Empty:
                    break
                if request is None:
                    self._stopping = True  # commit what was taken, then stop
                    break
                batch.append(request)
            writes = [request for request in batch if request.bodies]  # drains have none
            error: StoreError | None = None
            started = time.perf_counter()
            if writes:
                try:
                    core.commit(writes)
                except StoreError as exc:
                    error = exc
                except Exception as exc:
                    # sqlite3 errors, and anything unforeseen: every waiter of the batch
                    # learns it failed, and the thread goes on with the next batch.
                    error = StoreError(f"append failed: {exc}")
                    error.__cause__ = exc
            seconds = time.perf_counter() - started
            self._answers.append((batch, writes, error, seconds))
            # Wake the loop for these answers unless a wake-up is already due (the loop
            # is behind: that one, or the next append on the loop, takes them too). Not
            # waking while more work is queued would save a socket write, but the callers
            # of this batch would then wait for the next one too, and the loop could not
            # serve them while the thread commits (measured: 200 appenders lost a third
            # of their throughput).
            self._wake_loop()
            if self._stopping:
                return

    def _wake_loop(self) -> None:
        # On the writer thread, after a batch: make sure the loop sees the answers.
        if self._wake_pending:
            return  # a wake-up is scheduled and has not run yet: it takes these too
        self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self.deliver)
        except RuntimeError:
            pass  # the event loop is closed: nobody is waiting any more

    def deliver(self) -> None:
        """Hand the outcomes of every batch the thread has finished to their callers.

        On the event loop: from the thread's wake-up, and from every append (so a busy loop
        collects answers without being woken for them).
        """
        self._wake_pending = False  # before draining: a later answer schedules a new wake
        answers = self._answers
        inflight = self._store._inflight
        while answers:
            batch, writes, error, seconds = answers.popleft()
            self._in_flight -= len(batch)
            if error is None:
                self._store._record_batch(writes, seconds)
            for request in batch:
                if error is not None and request.bodies:
                    request.fail(error)
                else:
                    request.finish()
                inflight.discard(request)
        if self._space_waiters:
            space, self._space = self._space, anyio.Event()
            self._space_waiters = 0
            space.set()

    async def on_stop(self) -> None:
        # Let the thread finish the transaction it is in (if any), then fail whatever is
        # still queued: it was never written.
        self._draining = True
        self._stopping = True
        self._queue.put(None)
        await anyio.to_thread.run_sync(self._thread.join)
        await anyio.lowlevel.checkpoint()  # run the thread's last wake-up, if any
        self.deliver()  # batches it committed: their callers learn so, whatever happened
        closed = StoreClosedError("append", "the store closed before it was written")
        while True:
            try:
                request = self._queue.get_nowait()
            except Empty:
                break
            if request is not None:
                request.fail(closed)
        self._space.set()
        self._store._fail_inflight()
