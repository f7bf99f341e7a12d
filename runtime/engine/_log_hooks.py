"""What a run's log calls out to: its commit hooks and observers, and its runtime's hooks
for the run (its claim, its threads' drains)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from eventstore import EventBody

__all__ = ["CommitHook", "CommitObserver", "RunHooks"]

#: Called after each commit with (run_id, last committed seq, the bodies just committed).
CommitHook = Callable[[str, int, Sequence[EventBody]], Awaitable[None] | None]

#: Told synchronously of each committed batch: (run_id, the bodies, seconds from append to
#: commit, None for an in-memory log). Must not block or raise: metrics and logs use it,
#: and unlike a CommitHook it keeps the executor's non-waiting submit path.
CommitObserver = Callable[[str, Sequence[EventBody], float | None], None]


class RunHooks(Protocol):
    """A live run's hooks into its runtime, one object per run (control/_run_hooks.py):
    whether the run's claim is still held here (always, without claims); ``drain(node)``
    as a plain-def thread of the node starts, returning what to call once it ends (a run
    whose executor stopped while one runs is draining); ``drained(node, seconds)`` waits
    until none runs (at most that long, a default for None), False if one still does."""

    def holds(self) -> bool: ...

    def drain(self, node_id: str) -> Callable[[], None]: ...

    def drained(self, node_id: str, timeout: float | None) -> Awaitable[bool]: ...
