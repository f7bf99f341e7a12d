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

import contextlib
from collections.abc import Callable
from typing import Final

import anyio

from actors import ActorError
from eventstore import RunOwnedError

from .._errors import RunDrainingError, RunNotFoundError
from .._run_logs import RunLogs
from ._live_runs import LiveRuns
from ._owned_outcome import OwnedOutcome
from ._ownership import RunOwnership

__all__ = ["DRAIN_WAIT", "Draining", "DrainingRuns", "claim_to_resume"]

#: How long a resume in the draining process waits for the abandoned attempts to end.
DRAIN_WAIT: Final = 30.0


class _Drain:
    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.count = 0
        self.ended: anyio.Event | None = None  # made by the first wait only


class Draining:
    """The threads of plain-def attempts (and the tasks of stopped async attempts)
    running in this process, counted by run and by node; ``on_drained(run_id)`` once a
    run's last one ended."""

    def __init__(self, on_drained: Callable[[str], None]) -> None:
        self._counts: dict[object, _Drain] = {}  # run_id, and (run_id, node_id)
        self._on_drained = on_drained

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._counts

    def nodes(self, run_id: str) -> list[str]:
        """The nodes of ``run_id`` whose abandoned attempts still run here."""
        return sorted(key[1] for key in self._counts if type(key) is tuple and key[0] == run_id)

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


class DrainingRuns:
    """The claims this runtime keeps for runs draining here: counted by :class:`Draining`,
    a run's claim is kept (not given up) when its executor stops while an abandoned
    attempt of it runs on, marked "draining" in the store with the nodes that run on
    (:meth:`eventstore.ClaimingStore.mark_draining`: what the run listing, ``magistrate
    show`` and the HTTP API read), and given up once the last one ends, unless a resume
    here waits for it (then the claim is the resume's, its mark cleared)."""

    def __init__(self, live: LiveRuns, logs: RunLogs, ownership: RunOwnership | None) -> None:
        self.live = live
        self.logs = logs
        self.ownership = ownership
        self.draining = Draining(self._drained)
        self._kept: set[str] = set()
        self._waited: set[str] = set()

    def keep(self, run_id: str, outcome: OwnedOutcome, start: Callable[..., object]) -> bool:
        """The executor of ``run_id`` stopped (its outcome is set): if an abandoned attempt
        of it still runs here, keep its claim, marked draining before the outcome is seen
        (``start`` runs the marking in a task); False if none runs (give the claim up)."""
        if self.ownership is None or run_id not in self.draining:
            return False
        self._kept.add(run_id)
        start(self._mark, run_id, outcome)
        return True

    async def _mark(self, run_id: str, outcome: OwnedOutcome) -> None:
        try:
            if run_id in self._kept and self.ownership is not None:
                nodes = ", ".join(self.draining.nodes(run_id)) or None
                await self.ownership.mark_draining(run_id, nodes)
        finally:
            outcome.released()

    def _drained(self, run_id: str) -> None:
        """The last abandoned attempt of ``run_id`` here ended: a claim kept for it is
        given up, unless the run is live here again (resumed meanwhile)."""
        if run_id not in self._kept:
            return
        self._kept.discard(run_id)
        if run_id in self._waited:
            return  # a resume here waits for this: the claim is its own
        if self.ownership is not None and self.live.get(run_id) is None:
            # Called on the loop outside any task (a thread's end): released in a task.
            with contextlib.suppress(ActorError):  # closing: release_all gives it up
                self.live.system.start_task(self.ownership.release, run_id)

    async def ready_to_resume(self, run_id: str) -> None:
        """Before a resume here: wait for the run's abandoned attempts here to end (at
        most DRAIN_WAIT seconds; RunDrainingError if they do not), so two attempts of a
        node never run at once; a claim kept while it drained is the resume's now (its
        draining mark cleared)."""
        kept = run_id in self._kept
        if run_id in self.draining:
            self._waited.add(run_id)  # the claim kept for it stays when it ends
            try:
                drained = await self.draining.wait(run_id)
            finally:
                self._waited.discard(run_id)
            if not drained:
                state = await self.logs.get_state(run_id)
                why = f"an abandoned attempt still runs in this process after {DRAIN_WAIT:g} s"
                raise RunDrainingError(run_id, state.status, why)
        self._kept.discard(run_id)
        if kept and self.ownership is not None:
            await self.ownership.mark_draining(run_id, None)


async def claim_to_resume(ownership: RunOwnership, logs: RunLogs, run_id: str) -> None:
    """Claim a run to resume it here; a run that is not running whose claim another
    process holds is draining there (RunDrainingError says so; RunOwnedError for a run
    live elsewhere). RunNotFoundError, claiming nothing, for a run the store does not hold
    (a claim would leave a row naming it)."""
    if logs.store is not None and await logs.store.get_run(run_id) is None:
        raise RunNotFoundError(run_id)
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
