"""One control action on a run at a time in this process.

A resume, an approval or a rejection reads the run, may claim it, appends and launches its
executor: a second action on the same run arriving meanwhile (a double click on Approve, a
resume racing an approval) must see what the first left, not interleave with it. Two such
actions interleaved could each claim the run, and the one that lost (refused, recording
nothing) then gave up the claim the winner's executor runs under, leaving the run
"running" with nobody executing it. The store's fence still orders actions from different
processes (their claims and the seq each append expects); this orders those of one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

__all__ = ["RunLocks"]


class _Held:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.users = 0  # the actions holding the lock or waiting for it


class RunLocks:
    """A lock per run, held while a control action on it runs; kept only while in use."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    @asynccontextmanager
    async def acting_on(self, run_id: str) -> AsyncIterator[None]:
        """Hold ``run_id``'s lock for the block, after the actions on it already waiting."""
        held = self._held.get(run_id)
        if held is None:
            held = self._held[run_id] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if not held.users:
                del self._held[run_id]

    def __len__(self) -> int:
        """How many runs have an action holding or waiting for their lock."""
        return len(self._held)
