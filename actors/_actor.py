"""Actors and the system that runs them on an anyio task group (their references and
tasks are in actors._ref)."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from ._errors import ActorError, ActorStoppedError, MailboxFullError
from ._mailbox import MailboxConfig
from ._messages import Terminated
from ._ref import ON_START, ON_STOP, ON_STOPPED, ActorRef
from ._task import run_actor

__all__ = ["Actor", "ActorSystem"]

_names = itertools.count(1)

#: An actor class's flags (see _flags), by class: spawn looks them up once per class.
_FLAGS: dict[type, tuple[int, bool]] = {}
_FLAGS_KEPT = 4096


class Actor:
    """Base class of an actor: private state plus a handler run one message at a time.

    Override :meth:`receive`; its return value is the reply to an ``ask`` (ignored for a
    ``tell``). An exception raised by ``receive`` (or ``on_start``) stops the actor: the
    exception is raised to the asker of that message, kept as ``ActorRef.failure`` and
    announced to watchers as a :class:`Terminated` message. It never reaches the system's
    task group, so siblings keep running.

    ``self.ref`` and ``self.system`` are set by :meth:`ActorSystem.spawn` before
    ``on_start`` runs. They are slots: a subclass that declares ``__slots__`` of its own
    has no ``__dict__`` (a live run holds its actors, and a dict's values are ~280 bytes).
    """

    __slots__ = ("ref", "system")

    ref: ActorRef
    system: ActorSystem

    async def on_start(self) -> None:
        """Runs once in the actor's task before the first message."""

    async def receive(self, message: Any) -> Any:
        """Handle one message. Never called concurrently with itself."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement receive()")

    def receive_now(self, message: Any) -> bool:
        """Optionally handle a told ``message`` synchronously, in the sender's task.

        Called instead of queueing a ``tell`` when the actor is idle (parked on an empty
        mailbox) and not stopping, so the order of messages and one-at-a-time handling
        hold; return True if it was handled, False to have it queued for :meth:`receive`
        as usual. It must not await, block or raise (an exception reaches the sender). For
        a handler that only hands work on (starts a task, forwards): it spares the
        actor's task a wake-up per message. The default is never called.
        """
        return False

    async def on_stop(self) -> None:
        """Runs once when the actor stops, shielded from cancellation for a few seconds."""

    def stop_waits(self) -> bool:
        """Whether an overridden ``on_stop`` has anything to do now (asked, synchronously,
        when the actor is stopped while idle). False lets the stop skip ``on_stop`` and
        complete at once, in the stopper's task, with no task of the actor's own. The
        default is True: ``on_stop``, when overridden, always runs."""
        return True

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


class ActorSystem:
    """Runs actors as tasks of one system; no actor task outlives it.

    Use as ``async with ActorSystem() as system``. Leaving the block stops every actor,
    cancelling in-flight work; no actor task outlives it.

    An actor's task starts when it is spawned; an actor with ``receive_now`` has one
    only while it has work (see actors._ref). On asyncio, actor tasks are
    plain asyncio tasks that the system tracks itself: spawning one through an anyio task
    group costs several times what the task costs otherwise, and the system needs none of
    what the group adds, since an actor's task handles its own errors. Each task of an
    actor runs in an anyio cancel scope of its own (how a busy actor is stopped), so anyio
    shields inside handlers hold. On any other anyio backend the system uses a task group.
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
        # One callback for every task, not a bound method per task (each one more object a
        # live run holds for the cyclic collector); it holds the containers, not the system,
        # so no cycle runs through it.
        self._on_task_done = _TaskDone(self._tasks, self._helpers, self._errors)
        # The context it runs in: one empty context for every task, not a copy of the
        # spawner's per task (add_done_callback's default; it sets no context variable).
        self._done_context = contextvars.Context()

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
            for ref in list(self._live.values()):
                ref.stop_nowait()  # an idle actor has no task to cancel: this starts one
            self._tg.cancel_scope.cancel()
            return await self._tg.__aexit__(*exc_info)
        for ref in list(self._live.values()):
            ref.stop_nowait()
        for task in self._helpers:
            task.cancel()
        # Wait for every task, as a task group would, even if this task is cancelled; then
        # raise the cancellation as it came (an anyio cancel scope knows its own by it).
        cancelled: asyncio.CancelledError | None = None
        while self._tasks or self._helpers:
            try:
                await asyncio.wait(self._tasks | self._helpers)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
                for task in self._tasks | self._helpers:
                    task.cancel()
        if self._errors:
            errors = list(self._errors)  # the list _TaskDone holds stays the system's
            self._errors.clear()
            raise BaseExceptionGroup("actor tasks failed", errors)
        if cancelled is not None:
            raise cancelled
        return None

    def _start(self, helper: bool, function: Any, *args: Any, name: str) -> None:
        if self._tg is not None:
            self._tg.start_soon(function, *args, name=name)
            return
        assert self._loop is not None
        task = self._loop.create_task(function(*args), name=name)
        (self._helpers if helper else self._tasks).add(task)
        task.add_done_callback(self._on_task_done, context=self._done_context)

    def _start_actor(self, ref: ActorRef) -> None:
        """Start a task of ``ref``'s actor (it has a message, or is to start or stop)."""
        if self._tg is not None:
            self._tg.start_soon(run_actor, ref, self, name=ref.name)
            return
        assert self._loop is not None
        task = self._loop.create_task(run_actor(ref, self), name=ref.name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done, context=self._done_context)

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
        cls = type(actor)
        flags = _FLAGS.get(cls)
        if flags is None:
            flags = _flags(cls)
        hooks, now = flags
        capacity = (mailbox or self._default_mailbox).capacity
        ref = ActorRef(name, actor, capacity, hooks, self, now=now)
        actor.ref = ref
        actor.system = self
        if watcher is not None:
            ref._watch(watcher)
        self._live[name] = ref
        if hooks & ON_START or not now:  # with receive_now, it may wait for its first message
            ref._wake()
        return ref

    def watch(self, ref: ActorRef, watcher: ActorRef) -> None:
        """Have ``watcher`` told :class:`Terminated` when ``ref`` stops (at once if it has)."""
        if ref.stopped:
            self._notify(watcher, ref.terminated())
        else:
            ref._watch(watcher)

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

    def _ended(self, ref: ActorRef) -> None:
        """Forget the stopped actor of ``ref``; tell its watchers of its end (the note made
        only for them: a run's node actors have none)."""
        if self._live.get(ref.name) is ref:
            del self._live[ref.name]
        watchers = ref._watchers
        if watchers is None:
            return
        # A stopping watcher handles no further message (its mailbox is dropped): a run's
        # executor stopping its node actors hears of none of them.
        if not isinstance(watchers, tuple):  # the one watcher: no tuple made for it
            if not watchers._stop_requested:
                self._notify(watchers, ref.terminated())
            return
        note = ref.terminated()
        for watcher in watchers:
            if not watcher._stop_requested:
                self._notify(watcher, note)

    def _notify(self, watcher: ActorRef, note: Terminated) -> None:
        try:
            watcher.tell_nowait(note)
        except MailboxFullError:
            # Never drop a termination notice: wait for space in a task of our own.
            if self._entered and not self._closing:
                self._start(True, _tell_ignoring_stopped, watcher, note, name="actor-notice")
        except ActorStoppedError:
            pass  # the watcher is gone; nobody is left to tell


def _flags(cls: type[Actor]) -> tuple[int, bool]:
    """The hooks ``cls`` overrides (ON_START | ON_STOP | ON_STOPPED: small ints, not a
    tuple, so no object per actor) and whether it has a synchronous handler."""
    flags = (
        (ON_START if cls.on_start is not Actor.on_start else 0)
        | (ON_STOP if cls.on_stop is not Actor.on_stop else 0)
        | (ON_STOPPED if cls.on_stopped is not Actor.on_stopped else 0),
        cls.receive_now is not Actor.receive_now,
    )
    if len(_FLAGS) < _FLAGS_KEPT:
        _FLAGS[cls] = flags
    return flags


class _TaskDone:
    """An ended task of the system: forgotten, its error kept for the system's exit."""

    __slots__ = ("errors", "helpers", "tasks")

    def __init__(
        self,
        tasks: set[asyncio.Task[None]],
        helpers: set[asyncio.Task[None]],
        errors: list[BaseException],
    ) -> None:
        self.tasks = tasks
        self.helpers = helpers
        self.errors = errors

    def __call__(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.helpers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(task.exception())  # type: ignore[arg-type]


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
