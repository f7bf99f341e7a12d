"""Runs a Runtime does not drive step by step: control of runs not live here, and the
ownership callbacks (a lost claim, another process's events, recovery)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from actors import ActorRef, ActorStoppedError, ActorSystem
from eventstore import ConcurrencyError, EventBody, EventStore, LeaseLostError, StoreError

from ._errors import RunNotFoundError, RunStateError, SpecErrors
from ._ownership import OwnedOutcome, RunOwnership
from ._result import RunOutcome, RunResult, result_of
from .engine._messages import CancelRun
from .engine._runlog import CommitHook, CommitObserver, RunLog
from .events._catalogue import InputInjected, RunCancelled, RunPaused
from .events._state import RunState

if TYPE_CHECKING:
    from ._runtime import RunHandle

__all__ = ["CLOSED", "FINAL", "RunControl", "result_from_state"]

_log = logging.getLogger("magistrate.runtime")

FINAL = ("completed", "failed")

#: The reason recorded for runs cancelled because their runtime closed.
CLOSED = "the runtime closed"
#: How long closing waits for the runs' executors to record their cancellation, and then
#: for each cancellation recorded from the log of a run whose executor did not.
CLOSE_GRACE = 5.0


class RunControl:
    """The part of :class:`Runtime` that acts on runs from outside their executor."""

    store: EventStore | None
    hooks: list[CommitHook]
    observers: list[CommitObserver]
    concurrency: int
    recover: bool
    _ownership: RunOwnership | None
    _tasks: anyio.abc.TaskGroup | None
    _live: dict[str, tuple[ActorRef, RunOutcome, RunLog]]
    _memory_logs: dict[str, RunLog]
    _system: ActorSystem | None
    #: Runs that closing asked to cancel and whose executor did not report in time.
    _unstopped: list[tuple[str, RunOutcome]]

    if TYPE_CHECKING:

        async def get_state(self, run_id: str, *, at_seq: int | None = None) -> RunState: ...

        async def _resume(
            self,
            run_id: str,
            input: Mapping[str, Any] | None,
            *,
            outcome: RunOutcome | None = None,
        ) -> RunHandle: ...

    async def _control_elsewhere(
        self, run_id: str, action: str, *, reason: str = "", data: dict[str, Any] | None = None
    ) -> None:
        """Append a control event to a run not live here (paused, crashed, or live in
        another process, which sees it within its control interval). Retries while the
        owner appends meanwhile (each try re-reads the state)."""
        for _ in range(50):
            state = await self.get_state(run_id)
            body: EventBody
            if action == "cancel":
                if state.status in FINAL or state.status == "cancelled":
                    raise RunStateError(run_id, state.status, "nothing to cancel")
                body = RunCancelled(node_id=_first(state.pending), reason=reason)
            elif action == "pause":
                if state.status != "running":
                    raise RunStateError(run_id, state.status, "only a running run can pause")
                body = RunPaused(reason="user", node_id=_first(state.pending))
            else:
                if state.status in FINAL:
                    raise RunStateError(
                        run_id, state.status, "cannot inject input into a finished run"
                    )
                body = InputInjected(data=data or {})
            try:
                await self._append_offline(run_id, state, body)
                return
            except ConcurrencyError:
                await anyio.sleep(0.01)  # the owner appended meanwhile: read again
        raise RunStateError(run_id, "running", f"could not {action}: the run kept moving")

    async def _append_offline(self, run_id: str, state: RunState, body: Any) -> None:
        self._live.pop(run_id, None)
        log = self._memory_logs.get(run_id) or RunLog(
            run_id, self.store, last_seq=state.last_seq, hooks=self.hooks, observers=self.observers
        )
        await log.append([body])

    # ------------------------------------------------------------------ closing

    async def _cancel_live_runs(self) -> None:
        """Closing, before the actors stop: every run still live here is cancelled and
        its cancellation recorded (its resume point is where ``resume`` continues), unless
        this runtime is a worker (``recover=True`` with a store that records ownership):
        then its runs are handed over (their claims are released with nothing recorded,
        and another worker resumes them).

        Each executor records its own cancellation, as for :meth:`cancel`; one that does
        not within ``CLOSE_GRACE`` (it waits on something else, such as a store that does
        not answer) is stopped with the others and its cancellation is recorded from the
        committed log afterwards (:meth:`_record_unstopped`). Shielded: a closing that
        was itself cancelled still records what it can, within those bounds."""
        self._unstopped = []
        live = [(run_id, ref, out) for run_id, (ref, out, _) in self._live.items() if not out.done]
        if not live or (self.recover and self._ownership is not None):
            return
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            for _, ref, _ in live:
                try:
                    await ref.tell(CancelRun(reason=CLOSED))
                except ActorStoppedError:
                    pass  # stopped meanwhile (settling, or its claim lost): see below
            for _, _, outcome in live:
                await outcome.settled()
        for run_id, _, outcome in live:
            if not outcome.done:
                if isinstance(outcome, OwnedOutcome):
                    outcome.holding = True  # its executor's stop is not its result
                self._unstopped.append((run_id, outcome))

    async def _record_unstopped(self) -> None:
        """Closing, once the actors have stopped: record the cancellation of each run
        whose executor did not, as a cancel from elsewhere would (the committed log's
        pending nodes are its resume point), and report it to the run's handle."""
        if self.store is None:
            return  # the in-memory log closes with the runtime
        for run_id, outcome in self._unstopped:
            error: BaseException = RunStateError(run_id, "running", "the runtime closed")
            with anyio.move_on_after(CLOSE_GRACE, shield=True):
                try:
                    try:
                        await self._control_elsewhere(run_id, "cancel", reason=CLOSED)
                    except RunStateError:
                        pass  # it ended (or was cancelled) before it stopped
                    outcome.set(result_from_state(await self.get_state(run_id)))
                except (RunNotFoundError, RunStateError, StoreError) as exc:
                    error = exc
            if not outcome.done:
                _log.warning("run %s: closing could not record its cancellation: %s", run_id, error)
                assert isinstance(outcome, OwnedOutcome)  # a store's run
                outcome.fail_now(error)
        self._unstopped = []

    # ------------------------------------------------------------------ ownership

    def _heads(self) -> dict[str, int]:
        return {run_id: live[2].last_seq for run_id, live in self._live.items()}

    def _room(self) -> int:
        return self.concurrency - len(self._live)

    def _running_here(self, run_id: str) -> bool:
        """True while the run is live here, or its executor here has not yet stopped."""
        return run_id in self._live or (
            self._system is not None and self._system.has_actor(f"run:{run_id}")
        )

    async def _resume_claimed(self, run_id: str) -> None:
        """Continue a run this runtime just claimed (recovery); give it up if it turns
        out to have nothing to run, or if its previous executor here is still stopping
        (its lease ran out under load, say): a later round claims it again. Whatever
        else goes wrong is logged and the claim given up, so recovery itself goes on."""
        assert self._ownership is not None
        if self._running_here(run_id):
            _log.warning("run %s: claimed for recovery while its executor here stops", run_id)
            await self._ownership.release(run_id)
            return
        try:
            await self._resume(run_id, None)
        except (RunNotFoundError, RunStateError, SpecErrors) as exc:
            _log.warning("run %s: claimed for recovery but not resumed: %s", run_id, exc)
            await self._ownership.release(run_id)
        except Exception:
            _log.exception("run %s: claimed for recovery, resuming it failed", run_id)
            await self._ownership.release(run_id)

    async def _on_lease_lost(self, run_id: str) -> None:
        live = self._live.get(run_id)
        if live is None:
            return
        outcome = live[1]
        if isinstance(outcome, OwnedOutcome):
            outcome.holding = True
        await live[0].stop()
        self._live.pop(run_id, None)
        error = LeaseLostError(run_id, -1, -1, None)
        if isinstance(outcome, OwnedOutcome):
            outcome.fail_now(error)
        else:
            outcome.fail(error)

    async def _on_foreign_events(self, run_id: str) -> None:
        live = self._live.get(run_id)
        if live is not None and isinstance(live[1], OwnedOutcome) and not live[1].done:
            live[1].holding = True
            await self._settle(run_id, None)

    def _settle_soon(self, run_id: str, error: BaseException) -> None:
        if self._tasks is not None:
            self._tasks.start_soon(self._settle, run_id, error)

    async def _settle(self, run_id: str, error: BaseException | None) -> None:
        """Stop the run's executor here and continue from its log: another process
        appended to it (a cancel, pause or input), or the claim was lost."""
        live = self._live.get(run_id)
        if live is None:
            return
        ref, outcome, _ = live
        assert isinstance(outcome, OwnedOutcome)
        await ref.stop()
        if isinstance(error, LeaseLostError) or (
            self._ownership is not None and run_id not in self._ownership.claims
        ):
            _log.warning("run %s: its claim was lost (%s); stopped here", run_id, error)
            self._live.pop(run_id, None)
            outcome.fail_now(error or LeaseLostError(run_id, -1, -1, None))
            return
        try:
            state = await self.get_state(run_id)
            if state.status == "running":
                await self._resume(run_id, None, outcome=outcome)
                return
            outcome.set(result_from_state(state))
        except Exception as exc:
            outcome.fail_now(exc)


def _first(items: Sequence[str]) -> str | None:
    return items[0] if items else None


def result_from_state(state: RunState) -> RunResult:
    if state.status not in (*FINAL, "paused", "cancelled"):
        raise RunStateError(state.run_id, state.status, "the run has no result yet")
    return result_of(state)
