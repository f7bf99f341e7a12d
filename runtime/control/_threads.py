"""Worker threads for the blocking code the runtime runs (plain-def nodes, sync tools).

Such code cannot be interrupted: a cancel, a pause that stops a node, or an attempt's
deadline abandons the thread (the awaiting task stops waiting; what the thread returns
later is dropped). An abandoned thread may run on for as long as its code does, so the
threads are daemon threads: none of them keeps the interpreter from exiting (a
``magistrate run`` whose node hangs prints its result and exits), and closing a runtime
never waits for one.

Idle threads are kept for reuse (a step of a sync node costs no thread creation) and end
after :data:`IDLE_SECONDS` without work.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Final

__all__ = ["IDLE_SECONDS", "ExitRaised", "StrayCancellation", "own_failure", "run_in_thread"]

#: How long an idle worker thread waits for work before it ends.
IDLE_SECONDS: Final = 10.0

_lock = threading.Lock()
_idle: list[_Worker] = []


class ExitRaised(RuntimeError):
    """A node's or a tool's code raised ``SystemExit`` (``sys.exit()``) or, in a worker
    thread, ``KeyboardInterrupt``: it fails that attempt like any other error instead of
    ending the process that embeds the runtime (signals reach the main thread only, so a
    worker thread's is its own code's). The original is the ``__cause__``."""

    def __init__(self, raised: BaseException) -> None:
        called = f"{type(raised).__name__}({', '.join(map(repr, raised.args))})"
        super().__init__(f"{called} raised: a node or tool cannot end the process")
        self.__cause__ = raised


class StrayCancellation(RuntimeError):
    """A node's or a tool's code let ``CancelledError`` out although nothing cancelled its
    attempt (a task or future it awaited was cancelled by someone else): its failure, not
    the end of its lane."""

    def __init__(self) -> None:
        super().__init__(
            "CancelledError raised though nothing cancelled the attempt (a task or future "
            "it awaited was cancelled)"
        )


def own_failure(exc: BaseException) -> Exception | None:
    """What a ``BaseException`` that is not an ``Exception``, raised by a node's or a tool's
    code on the event loop, fails the attempt with; None for one that is not the code's to
    end the attempt with: a cancellation of its task (the runtime's, or its deadline's),
    ``KeyboardInterrupt`` (the user's Ctrl-C, which goes on to stop the program) and
    ``GeneratorExit`` (a coroutine being closed)."""
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
        return None
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return StrayCancellation() if task is not None and not task.cancelling() else None
    return ExitRaised(exc)


class _Job:
    """One call for a worker thread, and what its end tells the loop."""

    __slots__ = ("call", "context", "ended", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, call: Callable[[], Any]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.call = call
        self.context = contextvars.copy_context()
        #: Called on the loop when the call ends (see run_in_thread).
        self.ended: Callable[[], None] | None = None


async def run_in_thread(call: Callable[[], Any], on_end: Callable[[], None] | None = None) -> Any:
    """Run ``call()`` in a daemon worker thread and return what it returns (or raise what
    it raises). Cancellation stops the wait at once and abandons the thread. ``on_end``,
    if given, is called on the loop once the thread's call has ended, abandoned or not
    (the runtime keeps a run with an abandoned call "draining" meanwhile, see
    _draining.py)."""
    job = _Job(asyncio.get_running_loop(), call)
    job.ended = on_end
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.start()
    worker.jobs.put(job)
    return await job.future


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    if job.ended is not None:
        job.ended()
    future = job.future
    if future.done():
        return  # abandoned: the awaiting task was cancelled
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="magistrate worker", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _lock:
                    if self in _idle:
                        _idle.remove(self)
                        return
                continue  # taken for a job meanwhile: it is on its way
            error: BaseException | None = None
            result: Any = None
            try:
                result = job.context.run(job.call)
            except Exception as exc:  # handed to the awaiting task, which raises it
                error = exc
            except BaseException as exc:  # sys.exit() in the call: its failure (ExitRaised)
                error = ExitRaised(exc)
            try:
                job.loop.call_soon_threadsafe(_settle, job, result, error)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this answer
            del job, result, error
            with _lock:
                _idle.append(self)
