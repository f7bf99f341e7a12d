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

__all__ = ["IDLE_SECONDS", "run_in_thread"]

#: How long an idle worker thread waits for work before it ends.
IDLE_SECONDS: Final = 10.0

_Job = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any], contextvars.Context
]

_lock = threading.Lock()
_idle: list[_Worker] = []


async def run_in_thread(call: Callable[[], Any]) -> Any:
    """Run ``call()`` in a daemon worker thread and return what it returns (or raise what
    it raises). Cancellation stops the wait at once and abandons the thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.start()
    worker.jobs.put((loop, future, call, contextvars.copy_context()))
    return await future


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
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
                loop, future, call, context = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _lock:
                    if self in _idle:
                        _idle.remove(self)
                        return
                continue  # taken for a job meanwhile: it is on its way
            error: BaseException | None = None
            result: Any = None
            try:
                result = context.run(call)
            except BaseException as exc:  # handed to the awaiting task, which raises it
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this answer
            del loop, future, call, context, result, error
            with _lock:
                _idle.append(self)
