"""A time limit for the attempts one task runs one after another, armed lazily.

A plain node's attempt has a time limit (600 s by default) and nearly always ends long
before it. A cancel scope with a deadline per attempt puts a timer into the event loop's
heap and takes it out again on every step of every run. :class:`AttemptDeadline` keeps one
timer per task instead: an attempt only records its deadline; the timer is armed when
none is armed for an instant at or before that deadline, and when it fires early (the
attempt it was armed for ended) it moves on to the current attempt's deadline, if any.
Past the deadline it cancels the task; the attempt tells that cancellation from any other
by :attr:`expired` and takes it back (``Task.uncancel``), as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Protocol

__all__ = ["AttemptDeadline", "Expiring"]

#: The context every deadline's timer runs in: one empty context, not a copy of the
#: arming task's per timer (``call_at``'s default; one more object per live attempt). The
#: timer reads and sets no context variable.
_TIMER_CONTEXT = contextvars.Context()


class Expiring(Protocol):
    """What an attempt's deadline tells once it cancelled the attempt's task."""

    def attempt_expired(self) -> None: ...


class AttemptDeadline:
    """The deadline of the attempt a task is running, if any. Used on the loop only.

    Per attempt: :meth:`start` before it, :meth:`stop` after it (in a ``finally``); an
    attempt that ends in CancelledError with :attr:`expired` set was cut off by its
    deadline (call :meth:`take_back` to cancel the cancellation). :meth:`close` when the
    task will run no more attempts.

    The armed timer's callback is this object itself (no bound method per live lane),
    and ``on_expiry`` is an object told of the expiry, held only during its attempt.
    """

    __slots__ = (
        "_armed_at",
        "_deadline",
        "_handle",
        "_loop",
        "_on_expiry",
        "_task",
        "expired",
        "limit",
    )

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self._on_expiry: Expiring | None = None
        #: The running (or last) attempt passed its deadline and its task was cancelled.
        self.expired = False
        #: The time limit of the running (or last) attempt, in seconds.
        self.limit = 0.0

    def start(
        self,
        timeout: float,
        on_expiry: Expiring | None = None,
        task: asyncio.Task[object] | None = None,
    ) -> None:
        """The current task's attempt starting now may take ``timeout`` seconds;
        ``on_expiry`` is told (on the loop) just after the deadline cancels the task.
        ``task``: the current task, if the caller has it at hand."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._task = task if task is not None else asyncio.current_task()
        self.limit = timeout
        self._on_expiry = on_expiry
        self._deadline = deadline = loop.time() + timeout
        self.expired = False
        if self._handle is None or self._armed_at > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._arm(deadline)

    def stop(self) -> None:
        """The attempt ended (its timer stays armed for the next one)."""
        self._deadline = None
        self._task = None
        self._on_expiry = None

    def take_back(self) -> None:
        """Undo the cancellation the deadline requested (the attempt caught it)."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()

    def close(self) -> None:
        """No more attempts: disarm the timer (it would keep this object alive)."""
        self._deadline = None
        self._task = None
        self._on_expiry = None  # an abandoned attempt's never stopped: no cycle is left
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_at(when, self, context=_TIMER_CONTEXT)
        self._armed_at = when

    def __call__(self) -> None:
        """The timer fired."""
        self._handle = None
        deadline, task = self._deadline, self._task
        if deadline is None or task is None:
            return  # no attempt running: the next one arms the timer again
        if deadline <= self._armed_at:  # the timer was armed for this deadline or later
            self.expired = True
            task.cancel()
            if self._on_expiry is not None:
                self._on_expiry.attempt_expired()
        else:
            self._arm(deadline)  # armed for an attempt that ended: on to this one's
