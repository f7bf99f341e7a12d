"""What a :class:`~runtime.Runtime` needs of the event loop it is entered on."""

from __future__ import annotations

import asyncio

from ._errors import RunStateError

__all__ = ["check_backend"]


def check_backend() -> None:
    """Raise RunStateError unless this task runs on asyncio (the store drivers, the node
    threads and the actors' tasks are asyncio's): trio says so at the call, not later."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RunStateError(
            "-",
            "closed",
            "a Runtime runs on asyncio (asyncio.run, or anyio.run with the "
            "asyncio backend), and this task runs on another event loop (trio?)",
        ) from None
