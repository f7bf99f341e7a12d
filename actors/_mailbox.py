"""Mailboxes: their configuration, statistics, and the bounded queue itself.

An actor's mailbox has many producers (anyone holding its ref) and exactly one consumer
(the actor's own task). That is simpler than a general channel, and the actor hop is on
every hot path (each node step is two of them), so the queue is a list plus at most one
parked consumer: telling an idle actor is an append and one wake-up; telling a busy one is
an append. anyio's memory object streams would also work, but each receive on an empty
stream costs a scheduler round trip (its checkpoint) plus an Event, a receiver record and
two dict updates, several times what the hop itself needs.

Waiting uses the running asyncio loop's futures when there is one (the cheapest wake-up
there; anyio's cancel scopes cancel such a wait like any other) and an ``anyio.Event``
otherwise, so the core stays correct on any anyio backend.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Generator
from typing import Any, Generic, Protocol, TypeVar

import anyio
import msgspec

__all__ = [
    "Mailbox",
    "MailboxClosed",
    "MailboxConfig",
    "MailboxStatistics",
    "Waiter",
    "new_waiter",
]

T = TypeVar("T")


class MailboxConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How many messages an actor's mailbox holds before ``tell`` waits (backpressure)."""

    capacity: int = 1024

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"MailboxConfig.capacity must be >= 1, got {self.capacity}")


class MailboxStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one actor's mailbox."""

    actor: str
    capacity: int
    queued: int
    received: int
    processed: int
    failed: bool
    stopped: bool


class MailboxClosed(Exception):
    """Internal: the mailbox is closed (its actor stopped). ActorRef turns it into
    ActorStoppedError, which names the actor."""


class _Waiter(Protocol):
    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...

    def __await__(self) -> Generator[Any, None, Any]: ...


class _EventWaiter:
    """A one-shot wake-up on any anyio backend (used when no asyncio loop is running)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def done(self) -> bool:
        return self._event.is_set()

    def set_result(self, result: None, /) -> None:
        self._event.set()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._event.wait().__await__()


#: What :func:`new_waiter` returns: ``done()``, ``set_result(None)``, and awaitable.
Waiter = _Waiter


def new_waiter() -> _Waiter:
    """A one-shot wake-up for the current task: ``await`` it, ``set_result(None)`` it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return _EventWaiter()
    return loop.create_future()


class _Sender(Generic[T]):
    """A producer parked on a full mailbox, with the item it wants to put."""

    __slots__ = ("item", "refused", "taken", "waiter")

    def __init__(self, waiter: _Waiter, item: T) -> None:
        self.waiter = waiter
        self.item = item
        self.taken = False
        self.refused = False


class Mailbox(Generic[T]):
    """A bounded FIFO queue with one consumer; producers wait only while it is full.

    Items put by producers parked on a full mailbox enter it in the order they parked,
    before anything put later. ``close`` refuses further puts and gets (parked producers
    get MailboxClosed) and ``drain`` hands back what was still queued. Not thread-safe: one
    event loop.
    """

    __slots__ = ("_loop", "_receiver", "_senders", "capacity", "closed", "items")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # A list, not a deque: a mailbox holds a message or two at a time, and a deque
        # costs ~600 bytes a live actor (its first block), a short list ~90; popping the
        # head of a full mailbox (at most ``capacity`` items) moves a few KiB at worst.
        self.items: list[T] = []
        self.closed = False
        self._receiver: _Waiter | None = None
        # Producers parked on a full mailbox; made when the first one parks (a deque is
        # ~600 bytes, and most mailboxes never fill).
        self._senders: deque[_Sender[T]] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def _waiter(self) -> _Waiter:
        if self._loop is not None:
            return self._loop.create_future()
        return _EventWaiter()

    def __len__(self) -> int:
        return len(self.items)

    @property
    def consumer_waiting(self) -> bool:
        """True while the consumer is parked in :meth:`get` (the mailbox is empty)."""
        return self._receiver is not None

    def put_nowait(self, item: T) -> bool:
        """Queue ``item`` and wake the consumer; False (nothing queued) if the mailbox is full.

        Raises MailboxClosed if the mailbox is closed.
        """
        if self.closed:
            raise MailboxClosed
        items = self.items
        if len(items) >= self.capacity:
            return False
        items.append(item)
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            if not receiver.done():
                receiver.set_result(None)
        return True

    async def put(self, item: T) -> None:
        """Queue ``item``, waiting while the mailbox is full.

        Raises MailboxClosed if the mailbox is closed, or closes while this waits.
        Cancellation while waiting leaves the item unqueued, unless the consumer already
        took it in (then the cancellation still propagates).
        """
        if self.put_nowait(item):
            return
        sender = _Sender(self._waiter(), item)
        if self._senders is None:
            self._senders = deque()
        self._senders.append(sender)
        try:
            await sender.waiter
        except BaseException:
            if not sender.taken and not sender.refused:
                sender.refused = True  # withdrawn: the consumer skips it
            raise
        if sender.refused:
            raise MailboxClosed

    def get_nowait(self) -> T | None:
        """The next item, or None when the mailbox is empty or closed (items are never None)."""
        items = self.items
        if not items or self.closed:
            return None
        item = items.pop(0)
        senders = self._senders
        while senders:  # None or empty: nobody is parked
            # Room for one more: the longest-parked producer's item goes in now.
            sender = senders.popleft()
            if sender.refused or sender.waiter.done():
                continue  # withdrawn (its wait was cancelled)
            sender.taken = True
            items.append(sender.item)
            sender.waiter.set_result(None)
            break
        return item

    def arrival(self) -> _Waiter:
        """An awaitable that completes when an item arrives or the mailbox closes.

        For the one consumer, when :meth:`get_nowait` found nothing: await it, then call
        :meth:`get_nowait` again. Raises MailboxClosed if the mailbox is closed (and so
        stays empty for good).
        """
        if self.closed:
            raise MailboxClosed
        receiver = self._receiver
        if receiver is None or receiver.done():
            receiver = self._receiver = self._waiter()
        return receiver

    async def get(self) -> T:
        """The next item, waiting while the mailbox is empty (one consumer only).

        Raises MailboxClosed if the mailbox is closed and empty. Cancellation while
        waiting takes nothing.
        """
        while True:
            item = self.get_nowait()
            if item is not None:
                return item
            if self.closed:
                raise MailboxClosed
            waiter = self._receiver = self._waiter()
            try:
                await waiter
            finally:
                if self._receiver is waiter:
                    self._receiver = None

    def close(self) -> None:
        """Refuse every further put and get (parked puts fail; a parked get wakes and fails).

        What was queued stays queued for :meth:`drain`. Idempotent.
        """
        self.closed = True
        senders = self._senders
        while senders:
            sender = senders.popleft()
            if not sender.refused and not sender.waiter.done():
                sender.refused = True
                sender.waiter.set_result(None)
        receiver, self._receiver = self._receiver, None
        if receiver is not None and not receiver.done():
            receiver.set_result(None)

    def drain(self) -> list[T]:
        """Remove and return every queued item (after :meth:`close`, what was never handled)."""
        remaining, self.items = self.items, []
        return remaining
