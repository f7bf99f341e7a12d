"""Actor references: the handle through which an actor is told, asked and stopped, which
also holds its mailbox (the one consumer of that mailbox is the actor's task, in
actors._task).

An actor's task starts when it is spawned. An actor with a synchronous handler
(``Actor.receive_now``) has a task only while it has work: an idle one takes its messages
in the sender's task, so its own task ends once the mailbox is empty and the next queued
message starts another (in a copy of the context of the task that queued it, as
``receive_now`` runs in the sender's); without ``on_start``, its first task waits for
its first queued message. Such an idle actor holds no
task, coroutine, wake-up future or cancel scope, only its state and its mailbox: what the
cyclic collector walks, and what a process holds, per live actor. Any other actor's task
parks on its empty mailbox instead: waking a parked task costs less than starting one,
for an actor told a message on every step of a run."""

from __future__ import annotations

from typing import Any, Protocol

import anyio
import msgspec

from ._errors import ActorStoppedError, AskTimeoutError, MailboxFullError, NotAMessageError
from ._mailbox import (
    MailboxClosed,
    MailboxStatistics,
    ParkedSenders,
    Reply,
    Waiter,
    new_waiter,
)
from ._messages import Terminated

__all__ = ["ON_START", "ON_STOP", "ON_STOPPED", "ActorRef", "Behaviour", "System"]

#: The hooks an actor overrides (ActorRef's ``hooks`` flags): the default ones do nothing,
#: and skipping them spares a coroutine (and a shielded scope) per actor.
ON_START, ON_STOP, ON_STOPPED = 1, 2, 4

#: Classes seen to be msgspec Structs: a message's check is a set lookup of its class, not
#: ``isinstance`` through StructMeta (~0.14 us, twice a step). Bounded: a program making
#: classes without end has the rest checked the long way.
_MESSAGE_CLASSES: set[type] = set()
_MESSAGE_CLASSES_KEPT = 4096


def _not_a_message(message: object) -> bool:
    """Whether ``message`` is not a msgspec Struct (the slow path of the check)."""
    if not isinstance(message, msgspec.Struct):
        return True
    if len(_MESSAGE_CLASSES) < _MESSAGE_CLASSES_KEPT:
        _MESSAGE_CLASSES.add(type(message))
    return False


class System(Protocol):
    """What runs an actor's tasks and hears of its end (an :class:`actors.ActorSystem`)."""

    def _ended(self, ref: ActorRef) -> None: ...

    def _start_actor(self, ref: ActorRef) -> None: ...


class Behaviour(Protocol):
    """What a reference runs: an :class:`actors.Actor`'s hooks and handler."""

    async def on_start(self) -> None: ...

    async def receive(self, message: Any) -> Any: ...

    def receive_now(self, message: Any) -> bool: ...

    async def on_stop(self) -> None: ...

    def stop_waits(self) -> bool: ...

    def on_stopped(self) -> None: ...


#: A mailbox item: a told message, or a Reply that carries an asked one.
_Item = msgspec.Struct | Reply


class ActorRef:
    """The only handle to an actor. Cheap to copy around; safe to use from any task.

    It also holds the actor's mailbox (see actors._mailbox): one object per actor, not
    three, for the cyclic collector to walk.
    """

    __slots__ = (
        "_actor",
        "_capacity",
        "_closed",
        "_current",
        "_hooks",
        "_is_stopped",
        "_items",
        "_now",
        "_processed",
        "_received",
        "_receiver",
        "_running",
        "_scope",
        "_senders",
        "_starting",
        "_stop_requested",
        "_stopped",
        "_system",
        "_watchers",
        "failure",
        "name",
    )

    def __init__(
        self,
        name: str,
        actor: Behaviour,
        capacity: int,
        hooks: int,
        system: System,
        *,
        now: bool = False,
    ) -> None:
        self.name = name
        self._actor: Behaviour | None = actor
        self._system = system
        self._hooks = hooks  # ON_START | ON_STOP | ON_STOPPED: the ones it overrides
        # Whether the actor has a synchronous handler (see Actor.receive_now); a flag, not
        # the bound method (one more object per live actor for the cyclic collector). Such
        # an actor's task ends when its mailbox is empty (see the module docstring).
        self._now = now
        # The mailbox: its queue (made at the first queued message; never a shared empty
        # list, since it is appended to), its parked consumer and producers, and whether
        # it is closed (the actor stops: no further put or get).
        self._capacity = capacity
        self._items: list[_Item] | None = None
        self._receiver: Waiter | None = None
        self._senders: ParkedSenders[_Item] | None = None
        self._closed = False
        self._scope: anyio.CancelScope | None = None  # the running task's, once entered
        # Whether the actor has a task (running, parked, or about to end with nothing left
        # to do): while it has none, it is idle and the next message starts one.
        self._running = False
        # Whether its next task runs on_start first (the one spawn starts, if it has one).
        self._starting = bool(hooks & ON_START)
        self._stop_requested = False
        self._stopped: anyio.Event | None = None  # made when someone waits for the stop
        self._is_stopped = False
        # None, the one watcher (most actors have one or none), or a tuple of them.
        self._watchers: ActorRef | tuple[ActorRef, ...] | None = None
        self._current: Reply | None = None
        self._received = 0
        self._processed = 0
        #: The exception that stopped the actor, or ``None``.
        self.failure: BaseException | None = None

    def __repr__(self) -> str:
        state = "stopped" if self._is_stopped else "running"
        return f"<ActorRef {self.name} {state}>"

    @property
    def stopped(self) -> bool:
        """True once the actor has stopped (cleanly or by failure)."""
        return self._is_stopped

    def _watch(self, watcher: ActorRef) -> None:
        """Have ``watcher`` told Terminated when this actor stops (see ActorSystem.watch)."""
        watchers = self._watchers
        if watchers is None:
            self._watchers = watcher
        elif isinstance(watchers, tuple):
            self._watchers = (*watchers, watcher)
        else:
            self._watchers = (watchers, watcher)

    def _check(self, message: object) -> None:
        if type(message) not in _MESSAGE_CLASSES and _not_a_message(message):
            raise NotAMessageError(self.name, message)

    async def tell(self, message: msgspec.Struct) -> None:
        """Enqueue ``message``; wait only while the mailbox is full (backpressure).

        Raises ActorStoppedError if the actor is stopped, or stops while this waits.
        Cancellation while waiting leaves the message unsent. Messages from one sender are
        handled in the order they were told.
        """
        if type(message) not in _MESSAGE_CLASSES and _not_a_message(message):
            raise NotAMessageError(self.name, message)
        if self._now and self._handled_now(message):
            return
        try:
            # Enqueue without a scheduler round trip when there is room; wait otherwise.
            if not self._put_nowait(message):
                await self._put(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        self._received += 1
        if not self._running:
            self._wake()

    def tell_nowait(self, message: msgspec.Struct) -> None:
        """Enqueue ``message`` without waiting; raise MailboxFullError if the mailbox is full."""
        if type(message) not in _MESSAGE_CLASSES and _not_a_message(message):
            raise NotAMessageError(self.name, message)
        if self._now and self._handled_now(message):
            return
        try:
            queued = self._put_nowait(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        if not queued:
            raise MailboxFullError(self.name, self._capacity)
        self._received += 1
        if not self._running:
            self._wake()

    def _wake(self) -> None:
        """Start the task of an idle actor that has a message (or is to stop)."""
        self._running = True
        self._system._start_actor(self)

    def _handled_now(self, message: msgspec.Struct) -> bool:
        """Hand ``message`` to the actor's synchronous handler, here and now, when that
        keeps every guarantee of the mailbox: the actor is idle (it has no task, so its
        mailbox is empty: nothing told before is unhandled, and no handler is running) and
        not stopping."""
        actor = self._actor
        if self._running or self._stop_requested or actor is None:
            return False
        if not actor.receive_now(message):
            return False
        self._received += 1
        self._processed += 1
        if self._stop_requested and not self._running:  # stop_self: a task stops the actor
            self._close()
            self._wake()
        return True

    async def ask(self, message: msgspec.Struct, *, timeout: float | None = None) -> Any:
        """Send ``message`` and wait for the actor's reply (the return value of ``receive``).

        Blocks on mailbox space, then on the reply; ``timeout`` (seconds) bounds both and
        raises AskTimeoutError. If the handler raises, that exception is raised here. If the
        actor stops before answering, raises ActorStoppedError. Cancelling the caller
        abandons the reply; the actor still handles the message.
        """
        self._check(message)
        reply = Reply(message)
        if timeout is None:
            await self._ask(reply)
        else:
            with anyio.move_on_after(timeout):
                await self._ask(reply)
            if not reply.done:
                raise AskTimeoutError(self.name, type(message).__name__, float(timeout))
        if reply.error is not None:
            raise reply.error
        return reply.value

    async def _ask(self, reply: Reply) -> None:
        try:
            if not self._put_nowait(reply):
                await self._put(reply)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        self._received += 1
        if not self._running:
            self._wake()
        await reply.waiter

    async def stop(self) -> None:
        """Stop the actor now, cancelling the message in flight, and wait until it is stopped.

        Messages still queued are dropped; their askers get ActorStoppedError. Idempotent.
        """
        self.stop_nowait()
        await self.wait_stopped()

    def stop_nowait(self) -> None:
        """Start stopping the actor as :meth:`stop` does, without waiting for it to end.

        The actor's task finishes stopping (``on_stop``, watchers) when it next runs.
        From the actor's own ``receive``, use :meth:`Actor.stop_self` instead.
        """
        self._stop_requested = True
        if self._is_stopped:
            return
        if not self._running:
            # Idle: nothing is in flight. Its mailbox refuses messages from now on, and the
            # stop (on_stop, watchers) completes here when on_stop has nothing to wait for,
            # else in a task of its own.
            self._close()
            actor = self._actor
            if actor is not None and self._hooks & ON_STOP and actor.stop_waits():
                self._wake()
            else:
                self._stopped_now()
        elif self._closed or self._receiver is not None or self._scope is None:
            # Parked on its empty mailbox, not started yet, or stopping already: nothing
            # is in flight, so closing the mailbox ends its loop without a cancellation
            # (anyio's cancel delivery is far dearer than a wake-up).
            self._close()
        else:
            self._scope.cancel()

    async def wait_stopped(self) -> None:
        """Wait until the actor has stopped, for whatever reason."""
        if self._is_stopped:
            return
        if self._stopped is None:
            self._stopped = anyio.Event()
        await self._stopped.wait()

    def statistics(self) -> MailboxStatistics:
        """A snapshot of this actor's mailbox and counters."""
        return MailboxStatistics(
            actor=self.name,
            capacity=self._capacity,
            queued=len(self._items) if self._items else 0,
            received=self._received,
            processed=self._processed,
            failed=self.failure is not None,
            stopped=self._is_stopped,
        )

    # The mailbox. Many producers, one consumer (the actor's task); one event loop.

    def _put_nowait(self, item: _Item) -> bool:
        """Queue ``item`` and wake the consumer; False (nothing queued) if the mailbox is
        full. Raises MailboxClosed if it is closed."""
        if self._closed:
            raise MailboxClosed
        items = self._items
        if items is None:
            self._items = [item]
        elif len(items) < self._capacity:
            items.append(item)
        else:
            return False
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            if not receiver.done():
                receiver.set_result(None)
        return True

    async def _put(self, item: _Item) -> None:
        """Queue ``item``, waiting while the mailbox is full; its producers get in in the
        order they parked. Raises MailboxClosed if it is closed, or closes meanwhile."""
        if self._put_nowait(item):
            return
        if self._senders is None:
            self._senders = ParkedSenders()
        await self._senders.wait(item)

    def _take(self) -> _Item | None:
        """The next item, or None when the mailbox is empty or closed."""
        items = self._items
        if not items or self._closed:
            return None
        item = items.pop(0)  # a list, not a deque: it holds a message or two at a time
        if self._senders is not None:
            self._senders.admit(items)
        return item

    def _arrival(self) -> Waiter:
        """What the consumer awaits when :meth:`_take` found nothing: done when an item
        arrives or the mailbox closes. Raises MailboxClosed if it is closed."""
        if self._closed:
            raise MailboxClosed
        receiver = self._receiver
        if receiver is None or receiver.done():
            receiver = self._receiver = new_waiter()
        return receiver

    def _close(self) -> None:
        """Refuse every further put and get (parked producers fail; a parked consumer
        wakes). What was queued stays queued. Idempotent."""
        self._closed = True
        if self._senders is not None:
            self._senders.refuse()
        receiver, self._receiver = self._receiver, None
        if receiver is not None and not receiver.done():
            receiver.set_result(None)

    def _stopped_now(self) -> None:
        """Stop an idle actor whose ``on_stop`` has nothing to wait for, in the caller's
        task: no task, cancel scope or coroutine of its own (one a run's node actors spare)."""
        self._running = True  # no task may start for it from now on
        self._fail_unanswered()
        self._stopped_hooks(self._system)

    def _fail_unanswered(self) -> None:
        """Close the mailbox and drop what it holds: askers of the message in flight and
        of the queued ones get ActorStoppedError."""
        self._close()
        items, self._items = self._items, None
        if not items and self._current is None:
            return  # nothing queued or in flight (a run's actors, as they stop): no list
        unanswered = [item for item in items if type(item) is Reply] if items else []
        if self._current is not None:
            unanswered.append(self._current)
        if unanswered:
            stopped = ActorStoppedError(self.name, reason="stopped before answering")
            for reply in unanswered:
                reply.fail(stopped)

    def _stopped_hooks(self, system: System) -> None:
        """The stop's synchronous end: ``on_stopped``, the stopped mark, the watchers."""
        actor = self._actor
        assert actor is not None
        if self._hooks & ON_STOPPED:
            try:
                actor.on_stopped()
            except Exception as exc:
                if self.failure is None:
                    self.failure = exc
        self._is_stopped = True
        if self._stopped is not None:
            self._stopped.set()
        # The actor and its ref point at each other; cut the cycle so a stopped actor's
        # state is freed at once by reference counting, not by the cyclic collector.
        self._actor = None
        self._now = False
        system._ended(self)

    def terminated(self) -> Terminated:
        """The note a watcher of this stopped actor is told."""
        error = None
        if self.failure is not None:
            error = f"{type(self.failure).__name__}: {self.failure}"
        return Terminated(actor=self.name, error=error)
