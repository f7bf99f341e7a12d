"""The event loop a command runs on, and its bounded end.

``asyncio.run`` (and ``anyio.run``, which uses it) cancels every task left when the
command's coroutine returns and then waits for all of them: a node or tool that catches
``CancelledError`` and carries on, which the runtime has already abandoned (its run is
recorded), would keep the process alive for as long as its code runs. Here the leftover
tasks are cancelled and given :data:`LEFTOVER_GRACE` seconds to end; the loop is then
closed without the ones that did not, and one warning names them. The loop is asyncio's,
as ``anyio.run``'s default backend is.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from types import CoroutineType, GeneratorType
from typing import Any, Final

from ._common import Handler

__all__ = ["LEFTOVER_GRACE", "run_command"]

#: How long the tasks left when a command returns get to end once cancelled.
LEFTOVER_GRACE: Final = 1.0

#: How many of the tasks left behind the warning names.
_NAMED: Final = 5

# Modules whose frames are the machinery a task's code runs in, not the code itself.
_MACHINERY: Final = ("asyncio", "anyio", "actors", "runtime", "eventstore", "contextlib")


def run_command(handler: Handler, args: argparse.Namespace) -> int:
    """Run ``handler(args)`` on a new asyncio loop and return its exit code.

    As ``asyncio.run`` (SIGINT cancels the command and raises KeyboardInterrupt), except
    at the end: tasks left then are cancelled and waited for :data:`LEFTOVER_GRACE`
    seconds at most, and the loop closes without those that ignore their cancellation."""
    runner = asyncio.Runner()
    loop = runner.get_loop()
    try:
        return runner.run(_command(handler, args))
    finally:
        # Not runner.close(): it would wait for every task, however long it runs on.
        try:
            _settle(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _command(handler: Handler, args: argparse.Namespace) -> int:
    return await handler(args)


def _settle(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the loop's leftover tasks (and those they start meanwhile), wait for them
    within the grace, warn of those still running, and shut down as ``asyncio.run``
    does: async generators, then the default executor."""
    deadline = loop.time() + LEFTOVER_GRACE
    cancelled: set[asyncio.Task[Any]] = set()
    left: list[asyncio.Task[Any]] = []
    while True:
        pending = {task for task in asyncio.all_tasks(loop) if not task.done()}
        remaining = deadline - loop.time()
        if not pending or remaining <= 0:
            left = sorted(pending, key=lambda task: task.get_name())
            break
        for task in pending - cancelled:
            task.cancel()
        cancelled |= pending
        loop.run_until_complete(asyncio.wait(pending, timeout=remaining))
    for task in cancelled:
        if task.done() and not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during the command's shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
    if left:
        _warn(left)
    # Async generators are closed as asyncio.run closes them, within the grace too (one
    # that ignores its closing is left as a task is).
    closing = loop.create_task(loop.shutdown_asyncgens())
    loop.run_until_complete(asyncio.wait({closing}, timeout=max(deadline - loop.time(), 0.1)))
    if not closing.done():
        left.append(closing)
    if left:
        _quiet(loop, left)
    loop.run_until_complete(loop.shutdown_default_executor())


def _warn(left: list[asyncio.Task[Any]]) -> None:
    """The one warning of the tasks left running, naming them."""
    what = "; ".join(_describe(task) for task in left[:_NAMED])
    if len(left) > _NAMED:
        what += f"; and {len(left) - _NAMED} more"
    sys.stderr.write(
        f"magistrate: warning: {len(left)} task{'s' if len(left) != 1 else ''} ignored "
        f"{'their' if len(left) != 1 else 'its'} cancellation and still ran "
        f"{LEFTOVER_GRACE:g} s later, left behind as the process exits: {what}\n"
    )
    sys.stderr.flush()


def _quiet(loop: asyncio.AbstractEventLoop, left: list[asyncio.Task[Any]]) -> None:
    """Keep asyncio from saying "Task was destroyed but it is pending!" of each task left
    behind when the closed loop's task is collected: the warning said it once."""
    ids = {id(task) for task in left}
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if id(context.get("task")) in ids and "destroyed" in str(context.get("message")):
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _describe(task: asyncio.Task[Any]) -> str:
    """A task left behind, by the code it runs: the outermost function of its await
    chain that is not the runtime's or asyncio's (a node's or a tool's own function, where
    it waits: ``module.function at file:line``), else the outermost, and the task's name."""
    frames = _chain(task.get_coro())
    if not frames:
        return f"task {task.get_name()}"
    own = [f for f in frames if not _machinery(f[0])]
    module, name, filename, line = (own or frames)[0]
    return f"{module}.{name} at {filename}:{line} (task {task.get_name()})"


def _machinery(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _MACHINERY)


def _chain(awaitable: object) -> list[tuple[str, str, str, int]]:
    """The (module, qualified name, file, line) of each coroutine or generator a task's
    coroutine awaits, outermost first."""
    found: list[tuple[str, str, str, int]] = []
    current: object = awaitable
    while isinstance(current, (CoroutineType, GeneratorType, Coroutine)) and len(found) < 100:
        frame = getattr(current, "cr_frame", None) or getattr(current, "gi_frame", None)
        if frame is None:
            break
        module = str(frame.f_globals.get("__name__", "?"))
        name = getattr(current, "__qualname__", frame.f_code.co_name)
        found.append((module, name, frame.f_code.co_filename, frame.f_lineno))
        current = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
    return found
