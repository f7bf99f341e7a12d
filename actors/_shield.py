"""Finishing an awaitable whatever cancels its caller meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["finish", "settle"]

T = TypeVar("T")


async def finish(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end in a task of its own and return what it returns; a
    cancellation of the caller meanwhile is held until ``work`` has ended, then raised (as
    it came, so an anyio scope knows its own), whatever ``work`` ended with.

    For work that must not stop half-done (a claim taken and not yet held, a decision
    recorded and its run not yet launched) and that ends soon by itself. An anyio shield
    does not do it on asyncio: ``asyncio.wait_for`` and ``Task.cancel`` go through it.
    Asyncio only."""
    task, cancelled = await settle(work)
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: its caller has gone, and the error with it
        raise cancelled
    return task.result()


async def settle(
    work: Coroutine[Any, Any, T],
) -> tuple[asyncio.Task[T], asyncio.CancelledError | None]:
    """Run ``work`` to its end in a task of its own; return that ended task and the first
    cancellation of the caller meanwhile (None: none came), which the caller raises once
    it has taken the outcome in (:func:`finish` raises it at once). Asyncio only."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    return task, cancelled
