"""Runs kept "draining" while an abandoned attempt of theirs still runs in this process.

A plain-def node runs in a thread the runtime cannot interrupt: a cancel (or a stop from
settling) abandons the thread, which runs on while its code does (fenced: it records
nothing). Every such thread is counted here while it runs (from its start: a cancel's
result may be delivered before the abandoned attempt has even seen its cancellation); so
is the task of an async node from the moment its lane cancels it (or its deadline
abandons it) until it ends: one that swallows its cancellation is abandoned after its
grace and runs on, as a thread does. A run whose executor stopped while one still runs
is draining here: the runtime keeps the
run's claim (so a resume or a worker elsewhere is refused, see
:class:`runtime.RunDrainingError`), and a resume in this process waits for the drain, at
most :data:`DRAIN_WAIT` seconds, so that two attempts of a node never run at once; so
does the retry of an attempt abandoned at its deadline, for that node's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio

from eventstore import RunOwnedError

from .._errors import RunDrainingError
from .._run_logs import RunLogs
from ._ownership import RunOwnership

__all__ = ["DRAIN_WAIT", "Draining", "claim_to_resume"]

#: How long a resume in the draining process waits for the abandoned attempts to end.
DRAIN_WAIT: Final = 30.0


class _Drain:
    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.count = 0
        self.ended: anyio.Event | None = None  # made by the first wait only


class Draining:
    """The threads of plain-def attempts (and the tasks of stopped async attempts)
    running in this process, counted by run and by node; ``on_drained(run_id)`` once a run's last one ended."""

    def __init__(self, on_drained: Callable[[str], None]) -> None:
        self._counts: dict[object, _Drain] = {}  # run_id, and (run_id, node_id)
        self._on_drained = on_drained

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._counts

    def begin(self, run_id: str, node_id: str) -> Callable[[], None]:
        """A thread of ``node_id`` of ``run_id`` starts: counted until the returned
        callable is called (on the loop, when the thread's call ends)."""
        counts = self._counts
        keys = (run_id, (run_id, node_id))
        for key in keys:
            drain = counts.get(key)
            if drain is None:
                drain = counts[key] = _Drain()
            drain.count += 1

        def end() -> None:
            for key in keys:
                drain = counts[key]
                drain.count -= 1
                if drain.count == 0:
                    del counts[key]
                    if drain.ended is not None:
                        drain.ended.set()
            if run_id not in counts:
                self._on_drained(run_id)

        return end

    async def wait(self, key: object, timeout: float = DRAIN_WAIT) -> bool:
        """Wait until no thread of ``key`` (a run id, or (run id, node id)) runs, at most
        ``timeout`` seconds; True if none does."""
        drain = self._counts.get(key)
        if drain is None:
            return True
        if drain.ended is None:
            drain.ended = anyio.Event()
        with anyio.move_on_after(timeout):
            await drain.ended.wait()
        return drain.ended.is_set()

    async def wait_node(self, run_id: str, node_id: str, timeout: float | None) -> bool:
        """Wait until no earlier attempt of ``node_id`` runs (at most ``timeout`` seconds,
        DRAIN_WAIT for None): a retry of an attempt abandoned at its deadline never
        overlaps it."""
        return await self.wait((run_id, node_id), DRAIN_WAIT if timeout is None else timeout)


async def claim_to_resume(ownership: RunOwnership, logs: RunLogs, run_id: str) -> None:
    """Claim a run to resume it here; a run that is not running whose claim another
    process holds is draining there (RunDrainingError says so; RunOwnedError for a run
    live elsewhere)."""
    try:
        await ownership.claim(run_id)
    except RunOwnedError as exc:
        state = await logs.get_state(run_id)
        if state.status == "running":
            raise
        why = (
            f"its claim is still held by {exc.owner!r}, where an abandoned attempt of a "
            "node may still run; it can be resumed once that ends"
        )
        raise RunDrainingError(run_id, state.status, why) from exc
