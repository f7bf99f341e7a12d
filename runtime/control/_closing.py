"""What closing a runtime does to its runs: the runs live here are cancelled (or, in a
worker, handed over), and from the moment closing begins no run is launched here.

Closing begins (:meth:`Closing.cancel_live_runs`, the first thing ``Runtime.__aexit__``
does) before it lists the runs it cancels: a run launched before is on that list, and
every launch after is refused (:meth:`Closing.check`, which ``launch`` calls before it
spawns anything; nothing is awaited between the two). So a start, resume, fork or
approval that meets the closing either made its run live before (the close cancels it
like the others) or is refused with RunStateError ("the Runtime is closing"). One
refused after it recorded something (a fork's copy, a gate's decision, a run settled
after another process's events) ends as the close ends the live runs
(:meth:`Closing.unlaunched`): its cancellation recorded, or, in a worker, left running
with no claim for any worker. The close waits for the actions under way
(:meth:`Closing.acting`) before it stops anything, so they end so with the store open.
No run is left running with a closed runtime as its owner.
"""

from __future__ import annotations

import asyncio
import logging

import anyio

from actors import ActorStoppedError, Waiter
from eventstore import StoreError

from .._errors import RunChangedError, RunNotFoundError, RunStateError
from .._result import RunOutcome, result_from_state
from .._run_logs import RunLogs
from ..engine._messages import CancelRun
from ._elsewhere import ControlElsewhere
from ._live_runs import LiveRuns
from ._owned_outcome import OwnedOutcome
from ._ownership import RunOwnership

__all__ = ["CLOSED", "CLOSE_GRACE", "Closing"]

_log = logging.getLogger("magistrate.runtime")

#: The reason recorded for runs cancelled because their runtime closed.
CLOSED = "the runtime closed"
#: How long closing waits for the runs' executors to record their cancellation, and then
#: for each cancellation recorded from the log of a run whose executor did not.
CLOSE_GRACE = 5.0
#: Why a run is not launched once closing began (mirrors "the Runtime is not open").
CLOSING = (
    "the Runtime is closing (another task is leaving 'async with Runtime(...)'): nothing "
    "was started; start, resume or fork runs while it is open"
)


class Closing:
    """The closing of one runtime's run control: its live runs (``live``) are cancelled
    through their executors, or from their logs (``logs``, ``control_elsewhere``) when
    their executors did not stop; in a ``worker`` they are handed over instead
    (``ownership`` gives their claims up), once the starts waiting for their first
    commit (``starting``) have it."""

    def __init__(
        self,
        logs: RunLogs,
        live: LiveRuns,
        control_elsewhere: ControlElsewhere,
        ownership: RunOwnership | None,
        *,
        worker: bool,
        starting: dict[str, Waiter],
    ) -> None:
        self.logs = logs
        self.live = live
        self.control_elsewhere = control_elsewhere
        self.ownership = ownership
        self.worker = worker
        #: The waiters of the starts waiting for their run's first commit (RunControl's).
        self.starting = starting
        #: True once closing began: no run is launched here any more.
        self.began = False
        #: The actions under way that may launch a run (:meth:`acting`), and what closing
        #: waits on for them to end.
        self._acting = 0
        self._quiet: anyio.Event | None = None
        #: Runs that closing asked to cancel and whose executor did not report in time.
        self._unstopped: list[tuple[str, RunOutcome]] = []

    def check(self) -> None:
        """Raise RunStateError once closing began (a run about to be launched here)."""
        if self.began:
            raise RunStateError("-", "closing", CLOSING)

    def acting(self) -> Closing:
        """``with closing.acting():`` around an action that may launch a run (a start's
        claim and launch, a resume, a fork, a gate's decision): refused at once
        (RunStateError) once closing began; closing waits for the actions under way (at
        most ``CLOSE_GRACE``), whose launch it refuses, before it stops anything, so what
        they recorded is ended with the store still open (:meth:`unlaunched`)."""
        self.check()
        return self

    def __enter__(self) -> None:
        self._acting += 1

    def __exit__(self, *exc_info: object) -> None:
        self._acting -= 1
        if not self._acting and self._quiet is not None:
            self._quiet.set()

    def refused(self, error: BaseException) -> bool:
        """Whether ``error`` is a launch refused because closing began (:meth:`check`)."""
        return self.began and isinstance(error, RunStateError) and error.reason == CLOSING

    async def cancel_live_runs(self) -> None:
        """Closing, before the actors stop: no run is launched here from now on, and every
        run still live here is cancelled and its cancellation recorded (its resume point
        is where ``resume`` continues), unless this runtime is a worker: then its runs are
        handed over (their claims are released with nothing recorded, and another worker
        resumes them).

        Each executor records its own cancellation, as for a cancel; one that does not
        within ``CLOSE_GRACE`` (it waits on something else, such as a store that does not
        answer) is stopped with the others and its cancellation is recorded from the
        committed log afterwards (:meth:`record_unstopped`). Shielded: a closing that was
        itself cancelled still records what it can, within those bounds."""
        self.began = True  # from here on no run is launched: the list below has them all
        self._unstopped = []
        if self._acting:  # each refused at its launch, or done: ended before anything stops
            self._quiet = anyio.Event()
            with anyio.move_on_after(CLOSE_GRACE, shield=True):
                await self._quiet.wait()
        # Each run's executor and outcome as they are now (a run's hooks drop its outcome
        # once it is done).
        live = [
            (run_id, run.executor, run.outcome) for run_id, run in self.live if not run.outcome.done
        ]
        if not live:
            return
        if self.worker:
            # Handed over once their starts' first appends are answered: a claim made with
            # one is then held here, and given up with the others (RunControl.release_all).
            waiting = [
                started
                for started in self.starting.values()
                if isinstance(started, asyncio.Future) and not started.done()
            ]
            if waiting:
                with anyio.CancelScope(shield=True):  # (a wait that cancels none of them)
                    await asyncio.wait(waiting, timeout=CLOSE_GRACE)
            return
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            for _, executor, _ in live:
                try:
                    await executor.tell(CancelRun(reason=CLOSED))
                except ActorStoppedError:
                    pass  # stopped meanwhile (settling, or its claim lost): see below
            for _, _, outcome in live:
                await outcome.settled()
        for run_id, _, outcome in live:
            if not outcome.done:
                if isinstance(outcome, OwnedOutcome):
                    outcome.holding = True  # its executor's stop is not its result
                self._unstopped.append((run_id, outcome))

    async def record_unstopped(self) -> None:
        """Closing, once the actors have stopped: record the cancellation of each run
        whose executor did not, as a cancel from elsewhere would (the committed log's
        pending nodes are its resume point), and report it to the run's handle."""
        if self.logs.store is None:
            return  # the in-memory log closes with the runtime
        for run_id, outcome in self._unstopped:
            error: BaseException = RunStateError(run_id, "running", CLOSED)
            with anyio.move_on_after(CLOSE_GRACE, shield=True):
                try:
                    try:
                        await self.control_elsewhere(run_id, "cancel", reason=CLOSED)
                    except RunStateError:
                        pass  # it ended (or was cancelled) before it stopped
                    outcome.set(result_from_state(await self.logs.get_state(run_id)))
                except (RunNotFoundError, RunStateError, StoreError) as exc:
                    error = exc
            if not outcome.done:
                _log.warning("run %s: closing could not record its cancellation: %s", run_id, error)
                assert isinstance(outcome, OwnedOutcome)  # a store's run
                outcome.fail_now(error)
        self._unstopped = []

    async def unlaunched(self, run_id: str) -> RunStateError:
        """``run_id`` is running in the store and its launch here was refused because
        closing began (something of it was recorded first: a fork's copy, a gate's
        decision): end it as the close ends the runs live here, its cancellation recorded
        (a worker: its claim given up, left to any worker). Returns the error its caller
        raises, which says what became of the run."""
        if self.worker:
            if self.ownership is not None:
                await self.ownership.release(run_id)
            why = "the Runtime closed before the run went on here: it is left to any worker"
            return RunStateError(run_id, "running", why)
        failure: str | None = "the store did not answer in time"
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            try:
                await self.control_elsewhere(run_id, "cancel", reason=CLOSED)
                failure = None
            except RunChangedError:
                failure = None  # it ended, or was cancelled, meanwhile
            except (RunStateError, StoreError) as exc:
                failure = str(exc)
        if failure is not None:
            _log.warning("run %s: closing could not record its cancellation: %s", run_id, failure)
            why = f"the Runtime closed before the run went on here ({failure}): cancel or resume it"
            return RunStateError(run_id, "running", why)
        why = f"the Runtime closed before the run went on here: it is recorded cancelled ({CLOSED})"
        return RunStateError(run_id, "cancelled", f"{why}; resume it to go on")
