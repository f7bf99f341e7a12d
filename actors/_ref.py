"""Actor references: the handle through which an actor is told, asked and stopped, and
the actor's task that handles its mailbox one message at a time.

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
import anyio.lowlevel
import msgspec

from ._errors import ActorStoppedError, AskTimeoutError, MailboxFullError, NotAMessageError
from ._mailbox import Mailbox, MailboxClosed, MailboxStatistics, new_waiter
from ._messages import Terminated

__all__ = ["ActorRef", "Behaviour"]

_ON_STOP_GRACE = 5.0


class _System(Protocol):
    """What runs an actor's tasks and hears of its end (an :class:`actors.ActorSystem`)."""

    def _ended(self, ref: ActorRef, note: Terminated) -> None: ...

    def _start_actor(self, ref: ActorRef) -> None: ...


class Behaviour(Protocol):
    """What a reference runs: an :class:`actors.Actor`'s hooks and handler."""

    async def on_start(self) -> None: ...

    async def receive(self, message: Any) -> Any: ...

    def receive_now(self, message: Any) -> bool: ...

    async def on_stop(self) -> None: ...

    def stop_waits(self) -> bool: ...

    def on_stopped(self) -> None: ...


class _Reply:
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


#: A mailbox item: a told message, or a _Reply that carries an asked one.
_Item = msgspec.Struct | _Reply


class ActorRef:
    """The only handle to an actor. Cheap to copy around; safe to use from any task."""

    __slots__ = (
        "_actor",
        "_current",
        "_hooks",
        "_is_stopped",
        "_mailbox",
        "_now",
        "_processed",
        "_received",
        "_running",
        "_scope",
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
        hooks: tuple[bool, bool, bool],
        system: _System,
        *,
        now: bool = False,
    ) -> None:
        self.name = name
        self._actor: Behaviour | None = actor
        self._system = system
        # Whether the actor overrides on_start, on_stop, on_stopped: the default ones do
        # nothing, and skipping them spares a coroutine (and a shielded scope) per actor.
        self._hooks = hooks
        # Whether the actor has a synchronous handler (see Actor.receive_now); a flag, not
        # the bound method (one more object per live actor for the cyclic collector). Such
        # an actor's task ends when its mailbox is empty (see the module docstring).
        self._now = now
        self._mailbox: Mailbox[_Item] = Mailbox(capacity)
        self._scope: anyio.CancelScope | None = None  # the running task's, once entered
        # Whether the actor has a task (running, parked, or about to end with nothing left
        # to do): while it has none, it is idle and the next message starts one.
        self._running = False
        # Whether its next task runs on_start first (the one spawn starts, if it has one).
        self._starting = hooks[0]
        self._stop_requested = False
        self._stopped: anyio.Event | None = None  # made when someone waits for the stop
        self._is_stopped = False
        # None, the one watcher (most actors have one or none), or a tuple of them.
        self._watchers: ActorRef | tuple[ActorRef, ...] | None = None
        self._current: _Reply | None = None
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
        if not isinstance(message, msgspec.Struct):
            raise NotAMessageError(self.name, message)

    async def tell(self, message: msgspec.Struct) -> None:
        """Enqueue ``message``; wait only while the mailbox is full (backpressure).

        Raises ActorStoppedError if the actor is stopped, or stops while this waits.
        Cancellation while waiting leaves the message unsent. Messages from one sender are
        handled in the order they were told.
        """
        if not isinstance(message, msgspec.Struct):
            raise NotAMessageError(self.name, message)
        if self._now and self._handled_now(message):
            return
        try:
            # Enqueue without a scheduler round trip when there is room; wait otherwise.
            if not self._mailbox.put_nowait(message):
                await self._mailbox.put(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        self._received += 1
        if not self._running:
            self._wake()

    def tell_nowait(self, message: msgspec.Struct) -> None:
        """Enqueue ``message`` without waiting; raise MailboxFullError if the mailbox is full."""
        self._check(message)
        if self._now and self._handled_now(message):
            return
        try:
            queued = self._mailbox.put_nowait(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        if not queued:
            raise MailboxFullError(self.name, self._mailbox.capacity)
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
            self._mailbox.close()
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
        reply = _Reply(message)
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

    async def _ask(self, reply: _Reply) -> None:
        try:
            if not self._mailbox.put_nowait(reply):
                await self._mailbox.put(reply)
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
        mailbox = self._mailbox
        if not self._running:
            # Idle: nothing is in flight. Its mailbox refuses messages from now on, and the
            # stop (on_stop, watchers) completes here when on_stop has nothing to wait for,
            # else in a task of its own.
            mailbox.close()
            actor = self._actor
            if actor is not None and self._hooks[1] and actor.stop_waits():
                self._wake()
            else:
                self._stopped_now()
        elif mailbox.closed or mailbox.consumer_waiting or self._scope is None:
            # Parked on its empty mailbox, not started yet, or stopping already: nothing
            # is in flight, so closing the mailbox ends its loop without a cancellation
            # (anyio's cancel delivery is far dearer than a wake-up).
            mailbox.close()
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
            capacity=self._mailbox.capacity,
            queued=len(self._mailbox),
            received=self._received,
            processed=self._processed,
            failed=self.failure is not None,
            stopped=self._is_stopped,
        )

    async def _run(self, system: _System) -> None:
        """A task of the actor: ``on_start`` (the first one), then one message at a time
        until the actor stops or, for an actor with ``receive_now``, until the mailbox is
        empty (the task ends; the actor is idle);
        then :meth:`_shutdown`, which hands the :class:`Terminated` note to
        ``system._ended`` (the system forgets the actor and tells its watchers)."""
        actor = self._actor
        assert actor is not None
        mailbox = self._mailbox
        try:
            # The actor's cancel scope, for this task: stop() cancels the handler in flight
            # through it, so the anyio shields inside handlers hold.
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    if self._starting:
                        self._starting = False
                        if not self._stop_requested:
                            await actor.on_start()
                    streak = 0
                    while not self._stop_requested:
                        # Drain without a scheduler round trip while messages are queued,
                        # but yield now and then so a busy actor cannot starve the others.
                        streak += 1
                        if streak % 64 == 0:
                            await anyio.lowlevel.checkpoint()
                        item = mailbox.get_nowait()
                        if item is None:
                            if mailbox.closed:
                                break
                            if self._now:
                                # Idle: this task ends, and the next message starts one.
                                # Nothing below awaits, so no message can slip in between.
                                self._running = False
                                break
                            streak = 0
                            # The wake-up itself (a future), not a get() coroutine: this
                            # is every message's path to an idle actor.
                            await mailbox.arrival()
                            continue
                        if type(item) is _Reply:
                            reply: _Reply | None = item
                            message: Any = item.message
                        else:
                            reply, message = None, item
                        self._current = reply
                        try:
                            result = await actor.receive(message)
                        except Exception as exc:
                            # The actor is stopped; the exception goes to the asker and
                            # the watchers, never to the task group.
                            self.failure = exc
                            if reply is not None:
                                reply.fail(exc)
                            break
                        self._processed += 1
                        if reply is not None:
                            reply.set(result)
                        self._current = None
                except Exception as exc:  # raised by on_start: same treatment
                    self.failure = exc
        finally:
            self._scope = None
            if self._running:
                await self._shutdown(system)

    def _stopped_now(self) -> None:
        """Stop an idle actor whose ``on_stop`` has nothing to wait for, in the caller's
        task: no task, cancel scope or coroutine of its own (one a run's node actors spare)."""
        self._running = True  # no task may start for it from now on
        self._fail_unanswered()
        self._stopped_hooks(self._system)

    def _fail_unanswered(self) -> None:
        self._mailbox.close()
        unanswered = [item for item in self._mailbox.drain() if type(item) is _Reply]
        if self._current is not None:
            unanswered.append(self._current)
        if unanswered:
            stopped = ActorStoppedError(self.name, reason="stopped before answering")
            for reply in unanswered:
                reply.fail(stopped)

    async def _shutdown(self, system: _System) -> None:
        self._fail_unanswered()
        actor = self._actor
        assert actor is not None
        if self._hooks[1]:
            with anyio.move_on_after(_ON_STOP_GRACE, shield=True):
                try:
                    await actor.on_stop()
                except Exception as exc:
                    if self.failure is None:
                        self.failure = exc
        self._stopped_hooks(system)

    def _stopped_hooks(self, system: _System) -> None:
        """The stop's synchronous end: ``on_stopped``, the stopped mark, the watchers."""
        actor = self._actor
        assert actor is not None
        if self._hooks[2]:
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
        error = None
        if self.failure is not None:
            error = f"{type(self.failure).__name__}: {self.failure}"
        system._ended(self, Terminated(actor=self.name, error=error))
