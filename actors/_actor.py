"""Actors, their references and the system that runs them on an anyio task group."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
from anyio.abc import TaskGroup

from ._errors import (
    ActorError,
    ActorStoppedError,
    AskTimeoutError,
    MailboxFullError,
    NotAMessageError,
)
from ._mailbox import Mailbox, MailboxClosed, MailboxConfig, MailboxStatistics, new_waiter
from ._messages import Terminated

__all__ = ["Actor", "ActorRef", "ActorSystem"]

_ON_STOP_GRACE = 5.0
_names = itertools.count(1)


class Actor:
    """Base class of an actor: private state plus a handler run one message at a time.

    Override :meth:`receive`; its return value is the reply to an ``ask`` (ignored for a
    ``tell``). An exception raised by ``receive`` (or ``on_start``) stops the actor: the
    exception is raised to the asker of that message, kept as ``ActorRef.failure`` and
    announced to watchers as a :class:`Terminated` message. It never reaches the system's
    task group, so siblings keep running.

    ``self.ref`` and ``self.system`` are set by :meth:`ActorSystem.spawn` before
    ``on_start`` runs.
    """

    ref: ActorRef
    system: ActorSystem

    async def on_start(self) -> None:
        """Runs once in the actor's task before the first message."""

    async def receive(self, message: Any) -> Any:
        """Handle one message. Never called concurrently with itself."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement receive()")

    async def on_stop(self) -> None:
        """Runs once when the actor stops, shielded from cancellation for a few seconds."""

    def on_stopped(self) -> None:
        """Runs once, synchronously, after ``on_stop``, as the actor is marked stopped.

        For clean-up that does not wait: it costs no shielded cancel scope, where an
        overridden ``on_stop`` needs one (an actor per run adds up). An exception raised
        here is recorded as the actor's failure, as one from ``on_stop`` is.
        """

    def stop_self(self) -> None:
        """Stop this actor once the message in hand is handled; does not wait.

        For an actor that decides, in ``receive``, that its work is over: the messages
        still queued are dropped (their askers get ActorStoppedError), ``on_stop`` runs
        and watchers are told. (``await self.ref.stop()`` from ``receive`` would cancel the
        handler itself at its next checkpoint.)
        """
        self.ref._stop_requested = True


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
        "_is_stopped",
        "_mailbox",
        "_processed",
        "_received",
        "_scope",
        "_stop_requested",
        "_stopped",
        "_watchers",
        "failure",
        "name",
    )

    def __init__(self, name: str, actor: Actor, capacity: int) -> None:
        self.name = name
        self._actor: Actor | None = actor
        self._mailbox: Mailbox[_Item] = Mailbox(capacity)
        self._scope: anyio.CancelScope | None = None
        self._stop_requested = False
        self._stopped: anyio.Event | None = None  # made when someone waits for the stop
        self._is_stopped = False
        self._watchers: list[ActorRef] = []
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
        try:
            # Enqueue without a scheduler round trip when there is room; wait otherwise.
            if not self._mailbox.put_nowait(message):
                await self._mailbox.put(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        self._received += 1

    def tell_nowait(self, message: msgspec.Struct) -> None:
        """Enqueue ``message`` without waiting; raise MailboxFullError if the mailbox is full."""
        self._check(message)
        try:
            queued = self._mailbox.put_nowait(message)
        except MailboxClosed:
            raise ActorStoppedError(self.name) from None
        if not queued:
            raise MailboxFullError(self.name, self._mailbox.capacity)
        self._received += 1

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
        if mailbox.closed or mailbox.consumer_waiting or self._scope is None:
            # Idle (parked on an empty mailbox), not started, or its mailbox closed by an
            # earlier stop while idle (it has not run since): nothing is in flight, so
            # closing the mailbox ends its loop without a cancellation (anyio's cancel
            # delivery is far dearer than a wake-up).
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

    async def _run(self, system: ActorSystem) -> None:
        actor = self._actor
        assert actor is not None
        mailbox = self._mailbox
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    if not self._stop_requested and type(actor).on_start is not Actor.on_start:
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
                except MailboxClosed:
                    pass  # stop() closed the mailbox of the idle actor
                except Exception as exc:  # raised by on_start: same treatment
                    self.failure = exc
        finally:
            await self._shutdown(system)

    async def _shutdown(self, system: ActorSystem) -> None:
        self._mailbox.close()
        unanswered = [item for item in self._mailbox.drain() if type(item) is _Reply]
        if self._current is not None:
            unanswered.append(self._current)
        if unanswered:
            stopped = ActorStoppedError(self.name, reason="stopped before answering")
            for reply in unanswered:
                reply.fail(stopped)
        actor = self._actor
        assert actor is not None
        if type(actor).on_stop is not Actor.on_stop:
            with anyio.move_on_after(_ON_STOP_GRACE, shield=True):
                try:
                    await actor.on_stop()
                except Exception as exc:
                    if self.failure is None:
                        self.failure = exc
        if type(actor).on_stopped is not Actor.on_stopped:
            try:
                actor.on_stopped()
            except Exception as exc:
                if self.failure is None:
                    self.failure = exc
        self._is_stopped = True
        if self._stopped is not None:
            self._stopped.set()
        system._forget(self)
        # The actor and its ref point at each other; cut the cycle so a stopped actor's
        # state is freed at once by reference counting, not by the cyclic collector.
        self._actor = None
        error = None
        if self.failure is not None:
            error = f"{type(self.failure).__name__}: {self.failure}"
        note = Terminated(actor=self.name, error=error)
        for watcher in self._watchers:
            system._notify(watcher, note)


class ActorSystem:
    """Runs actors as tasks of one system; no actor task outlives it.

    Use as ``async with ActorSystem() as system``. Leaving the block stops every actor,
    cancelling in-flight work; no actor task outlives it.

    On asyncio, actor tasks are plain asyncio tasks that the system tracks itself:
    spawning one through an anyio task group costs several times what the actor's whole
    start costs otherwise (a run spawns two), and the system needs none of what the group
    adds, since an actor's task handles its own errors. Each actor still runs in an anyio
    cancel scope of its own (how it is stopped), so anyio shields inside handlers hold.
    On any other anyio backend the system uses a task group.
    """

    def __init__(self, *, default_mailbox: MailboxConfig | None = None) -> None:
        self._default_mailbox = default_mailbox or MailboxConfig()
        self._tg: TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # asyncio: the actors' tasks
        self._helpers: set[asyncio.Task[None]] = set()  # asyncio: timers and notices
        self._errors: list[BaseException] = []
        self._entered = False
        self._live: dict[str, ActorRef] = {}
        self._closing = False

    async def __aenter__(self) -> ActorSystem:
        if self._entered:
            raise ActorError("an ActorSystem can be entered only once")
        self._entered = True
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend
            tg = anyio.create_task_group()
            await tg.__aenter__()
            self._tg = tg
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self._closing = True
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            return await self._tg.__aexit__(*exc_info)
        for ref in list(self._live.values()):
            ref.stop_nowait()
        for task in self._helpers:
            task.cancel()
        # Wait for every task, as a task group would, even if this task is cancelled.
        cancelled = False
        while self._tasks or self._helpers:
            try:
                await asyncio.wait(self._tasks | self._helpers)
            except asyncio.CancelledError:
                cancelled = True
                for task in self._tasks | self._helpers:
                    task.cancel()
        if self._errors:
            errors, self._errors = self._errors, []
            raise BaseExceptionGroup("actor tasks failed", errors)
        if cancelled:
            raise asyncio.CancelledError
        return None

    def _start(self, helper: bool, function: Any, *args: Any, name: str) -> None:
        if self._tg is not None:
            self._tg.start_soon(function, *args, name=name)
            return
        assert self._loop is not None
        task = self._loop.create_task(function(*args), name=name)
        (self._helpers if helper else self._tasks).add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._helpers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._errors.append(task.exception())  # type: ignore[arg-type]

    @property
    def running(self) -> bool:
        return self._entered and not self._closing

    def has_actor(self, name: str) -> bool:
        """True while an actor named ``name`` runs here (until its task has ended)."""
        return name in self._live

    def spawn(
        self,
        actor: Actor,
        *,
        name: str | None = None,
        mailbox: MailboxConfig | None = None,
        watcher: ActorRef | None = None,
    ) -> ActorRef:
        """Start ``actor`` in the system's task group and return its reference.

        Does not wait: messages told before the actor's task runs wait in its mailbox.
        ``watcher`` receives a :class:`Terminated` message when the actor stops.
        """
        if not self._entered or self._closing:
            raise ActorError("the actor system is not running (use 'async with ActorSystem()')")
        if name is None:
            name = f"{type(actor).__name__}-{next(_names)}"
        elif name in self._live:
            raise ActorError(f"an actor named {name!r} is already running")
        ref = ActorRef(name, actor, (mailbox or self._default_mailbox).capacity)
        actor.ref = ref
        actor.system = self
        if watcher is not None:
            ref._watchers.append(watcher)
        self._live[name] = ref
        self._start(False, ref._run, self, name=f"actor:{name}")
        return ref

    def watch(self, ref: ActorRef, watcher: ActorRef) -> None:
        """Have ``watcher`` told :class:`Terminated` when ``ref`` stops (at once if it has)."""
        if ref.stopped:
            error = None if ref.failure is None else f"{type(ref.failure).__name__}: {ref.failure}"
            self._notify(watcher, Terminated(actor=ref.name, error=error))
        else:
            ref._watchers.append(watcher)

    async def stop(self, ref: ActorRef) -> None:
        """Stop one actor and wait for it (see :meth:`ActorRef.stop`)."""
        await ref.stop()

    def tell_later(self, ref: ActorRef, message: msgspec.Struct, delay: float) -> None:
        """Tell ``message`` to ``ref`` after ``delay`` seconds (a timer; does not wait).

        The timer lives in the system's task group: stopping the system cancels it. If the
        actor has stopped by then, the message is dropped.
        """
        if not self._entered or self._closing:
            raise ActorError("the actor system is not running")
        self._start(True, _tell_after, ref, message, delay, name="actor-timer")

    def start_task(self, function: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``function(*args)`` in a task of the system's own (does not wait).

        The task lives in the system's task group: stopping the system cancels it. An
        error it raises is the system's, as a timer's would be.
        """
        if not self._entered or self._closing:
            raise ActorError("the actor system is not running")
        self._start(True, function, *args, name="actor-task")

    def actors(self) -> list[ActorRef]:
        """The actors running now."""
        return list(self._live.values())

    def _forget(self, ref: ActorRef) -> None:
        if self._live.get(ref.name) is ref:
            del self._live[ref.name]

    def _notify(self, watcher: ActorRef, note: Terminated) -> None:
        try:
            watcher.tell_nowait(note)
        except MailboxFullError:
            # Never drop a termination notice: wait for space in a task of our own.
            if self._entered and not self._closing:
                self._start(True, _tell_ignoring_stopped, watcher, note, name="actor-notice")
        except ActorStoppedError:
            pass  # the watcher is gone; nobody is left to tell


async def _tell_ignoring_stopped(watcher: ActorRef, note: Terminated) -> None:
    try:
        await watcher.tell(note)
    except ActorStoppedError:
        pass


async def _tell_after(ref: ActorRef, message: msgspec.Struct, delay: float) -> None:
    await anyio.sleep(delay)
    try:
        await ref.tell(message)
    except ActorStoppedError:
        pass  # the addressee is gone: a timer for a stopped actor has nothing to do
