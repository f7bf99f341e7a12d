"""Mailboxes: their configuration and statistics, what they hold, and how one waits on them.

An actor's mailbox has many producers (anyone holding its ref) and exactly one consumer
(the actor's own task). That is simpler than a general channel, and the actor hop is on
every hot path (each node step is two of them), so the queue is a list plus at most one
parked consumer: telling an idle actor is an append and one wake-up; telling a busy one is
an append. anyio's memory object streams would also work, but each receive on an empty
stream costs a scheduler round trip (its checkpoint) plus an Event, a receiver record and
two dict updates, several times what the hop itself needs.

The queue's state lives in the actor's reference (actors._ref), not in an object of its
own: a run holds two actors for its whole life, and a mailbox object and its list were
two more objects each for the cyclic collector to walk. The list is made at the first
queued message (an actor handled in its senders' tasks, with ``receive_now``, may never
queue one); what is here are the queue's parts: the reply slot of an ``ask``, the
producers parked on a full mailbox (made when the first one parks), and the wake-ups.

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
    "MailboxClosed",
    "MailboxConfig",
    "MailboxStatistics",
    "ParkedSenders",
    "Reply",
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


class Reply:
    """An asked message with its one-shot reply slot (the handler's value or exception).

    It is what the mailbox holds for an ``ask``; a ``tell`` puts the bare message, so the
    common case allocates no envelope.
    """

    __slots__ = ("done", "error", "message", "value", "waiter")

    def __init__(self, message: msgspec.Struct) -> None:
        self.message = message
        self.waiter = new_waiter()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any) -> None:
        if not self.done:
            self.done = True
            self.value = value
            if not self.waiter.done():  # done already: the asker gave up (cancelled)
                self.waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.error = error
            if not self.waiter.done():
                self.waiter.set_result(None)


class _Sender(Generic[T]):
    """A producer parked on a full mailbox, with the item it wants to put."""

    __slots__ = ("item", "refused", "taken", "waiter")

    def __init__(self, waiter: _Waiter, item: T) -> None:
        self.waiter = waiter
        self.item = item
        self.taken = False
        self.refused = False


class ParkedSenders(Generic[T]):
    """The producers parked on one full mailbox, in the order they parked.

    Made when the first one parks (a deque is ~600 bytes, and most mailboxes never fill).
    Their items enter the mailbox in that order, one per item the consumer takes, before
    anything put later. Not thread-safe: one event loop.
    """

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[_Sender[T]] = deque()

    async def wait(self, item: T) -> None:
        """Park until ``item`` is taken into the mailbox (:meth:`admit`).

        Raises MailboxClosed if the mailbox closes first (:meth:`refuse`). Cancellation
        leaves the item out, unless it was taken in already (then the cancellation still
        propagates).
        """
        sender = _Sender(new_waiter(), item)
        self._queue.append(sender)
        try:
            await sender.waiter
        except BaseException:
            if not sender.taken and not sender.refused:
                sender.refused = True  # withdrawn: admit skips it
            raise
        if sender.refused:
            raise MailboxClosed

    def admit(self, items: list[T]) -> None:
        """The consumer took an item out of ``items``: the longest-parked producer's item
        (if any is still waiting) goes in now."""
        queue = self._queue
        while queue:
            sender = queue.popleft()
            if sender.refused or sender.waiter.done():
                continue  # withdrawn (its wait was cancelled)
            sender.taken = True
            items.append(sender.item)
            sender.waiter.set_result(None)
            return

    def refuse(self) -> None:
        """The mailbox closed: every parked producer wakes and raises MailboxClosed."""
        queue = self._queue
        while queue:
            sender = queue.popleft()
            if not sender.refused and not sender.waiter.done():
                sender.refused = True
                sender.waiter.set_result(None)
