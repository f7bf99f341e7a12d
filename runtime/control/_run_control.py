"""Control of a runtime's runs from outside their executors: cancel, pause and input for
runs live here (told to their executor) or not (appended to their log), runs handed to
any worker, the runtime's background tasks and the ownership callbacks (a lost claim,
another process's events, recovery); what closing does to the runs is _closing.py's."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from actors import ActorRef, Waiter
from eventstore import LeaseLostError, StoreError

from .._errors import (
    RunChangedError,
    RunNotFoundError,
    RunStateError,
    SpecErrors,
)
from .._result import RunOutcome, RunResult, result_from_state
from .._run_logs import RunLogs
from ..engine._foreign import take_in_foreign
from ..engine._messages import CancelRun, PauseRun
from ..engine._runlog import RunLog
from ..events._catalogue import RunCancelled
from ._closing import Closing
from ._draining import DrainingRuns
from ._elsewhere import ControlElsewhere, cancellation
from ._inject import inject_live
from ._live_runs import LiveRuns
from ._own_run import check_not_own_run
from ._owned_outcome import OwnedOutcome
from ._ownership import RunOwnership
from ._run_hooks import RunHooks
from ._run_locks import RunLocks
from ._unrunnable import Unrunnable

__all__ = ["RunControl"]

_log = logging.getLogger("magistrate.runtime")

#: Continues a run from its log here, reporting to ``outcome`` if given (else a new one).
Resume = Callable[[str, RunOutcome | None], Awaitable[object]]


class RunControl:
    """Acts on the runs of ``logs``: those in ``live`` through their executors, the others
    through their logs. With ``ownership`` (a store that records it), it keeps the claims
    of the live runs, settles a live run another process appended to, and with
    ``recover_concurrency`` (a worker) claims runnable runs while fewer than that many are
    live, continuing each with ``resume``.
    """

    def __init__(
        self,
        logs: RunLogs,
        live: LiveRuns,
        resume: Resume,
        *,
        ownership: RunOwnership | None = None,
        recover_concurrency: int | None = None,
        graph_seen: Callable[[str, object], None] | None = None,
    ) -> None:
        self.logs = logs
        #: Told (run id, graph id) before this process ends a run it does not execute
        #: (a cancel or a rejection at rest): the metrics count its end under its graph.
        self.graph_seen = graph_seen
        self.live = live
        self.ownership = ownership
        self.recover_concurrency = recover_concurrency
        self._resume = resume
        self._tasks: anyio.abc.TaskGroup | None = None
        self._spawn: Callable[..., object] | None = None  # a run log's spawn (see add_live)
        #: Runs this worker claimed and could not execute, and when to claim each again.
        self.unrunnable = None if ownership is None else Unrunnable(logs, ownership.owner)
        #: Runs with abandoned attempts still running here, and those of them whose claim
        #: is kept (marked draining) until they end (their executor stopped meanwhile).
        self.drains = DrainingRuns(live, logs, ownership)
        self.draining = self.drains.draining
        #: The waiters of the starts waiting for their run's first commit, by run id:
        #: held here, not by each run, and only until the start returns.
        self.starting: dict[str, Waiter] = {}
        #: Appends a control event to a run not live here (a cancel, pause or input).
        self.control_elsewhere = ControlElsewhere(
            logs, live, owner=None if ownership is None else ownership.owner, graph_seen=graph_seen
        )
        #: One resume, approval or rejection of a run at a time here (_run_locks.py).
        self.actions = RunLocks()
        #: What closing does to the runs (_closing.py): from its start, none is launched.
        self.closing = Closing(
            logs,
            live,
            self.control_elsewhere,
            ownership,
            worker=self.worker,
            starting=self.starting,
        )

    @property
    def worker(self) -> bool:
        """True for a worker: it recovers runs and hands its live runs over on closing."""
        return self.ownership is not None and self.recover_concurrency is not None

    # ------------------------------------------------------------------ background

    async def start_tasks(self, stack: AsyncExitStack) -> None:
        """Start the runtime's background tasks (ownership loops, settling runs that met
        another process's events), cancelled when ``stack`` closes. Nothing to do without a
        store."""
        if self.logs.store is None:
            return
        tasks = anyio.create_task_group()
        await tasks.__aenter__()

        async def stop_tasks() -> None:
            # Not given the block's exception: an error raised inside ``async with
            # Runtime(...)`` reaches the caller as itself, not wrapped in a group.
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)

        stack.push_async_callback(stop_tasks)
        self._tasks = tasks
        ownership = self.ownership
        if ownership is not None:
            tasks.start_soon(ownership.keep_leases, self._on_lease_lost)
            tasks.start_soon(ownership.watch_control, self.live.heads, self._on_foreign_events)
            if self.recover_concurrency is not None:
                assert self.unrunnable is not None
                tasks.start_soon(
                    ownership.recover,
                    self._room,
                    self._resume_claimed,
                    self._on_lease_lost,
                    self._not_to_claim,
                )

    def add_live(
        self,
        run_id: str,
        executor: ActorRef,
        outcome: RunOutcome,
        log: RunLog,
        hooks: RunHooks | None = None,
    ) -> None:
        """Count a run launched here as live; with ownership, its log appends only while
        this runtime holds the run's claim (a stalled process's lease may have run out).
        ``hooks``: the outcome's (:meth:`new_hooks`), if at hand; an owned outcome's are
        found from it."""
        # The outcome's hooks (new_hooks) are the log's too, and the run's live entry:
        # one object per run.
        if hooks is None:
            hooks = getattr(outcome, "on_conflict", None)
            if type(hooks) is not RunHooks:
                hooks = RunHooks(self, run_id)
        log.run_hooks = hooks
        if self.ownership is not None:
            # Another process's pause requests and input are taken in, not settled
            # (_foreign.py); from the store's answer too, which runs outside any task.
            if self._spawn is None:  # one bound method for every run
                self._spawn = self.live.system.start_task
            log.spawn = self._spawn
        self.live.add(run_id, hooks, executor, outcome, log)

    def new_outcome(self, run_id: str, started: Waiter | None) -> RunOutcome:
        """The outcome of a run about to launch here (see :meth:`new_hooks`)."""
        outcome: RunOutcome = self.new_hooks(run_id, started).outcome
        return outcome

    def new_hooks(self, run_id: str, started: Waiter | None) -> RunHooks:
        """The hooks of a run about to launch here, with its new ``outcome`` (whose
        callbacks they are). ``started`` (a start's) is set once the run stopped or met a
        conflict, in case its first commit never came."""
        if started is not None:
            self.starting[run_id] = started
        hooks = RunHooks(self, run_id)
        outcome: RunOutcome
        if self.logs.store is None:
            outcome = RunOutcome(on_done=hooks)
        else:
            # A store another process may append to: a run whose append meets that
            # process's events (ConcurrencyError) stops and obeys its log (_settle).
            outcome = OwnedOutcome(hooks, hooks)
        hooks.outcome = outcome
        return hooks

    def _start_answered(self, run_id: str) -> None:
        """The start waiting for ``run_id``'s first commit returns now, if one still waits."""
        started = self.starting.pop(run_id, None)
        if started is not None and not started.done():
            started.set_result(None)

    def forget(self, run_id: str, outcome: RunOutcome) -> None:
        """A run launched here is done (its outcome's ``on_done``)."""
        self._start_answered(run_id)
        if self.unrunnable is not None and self.recover_concurrency is not None:
            self.unrunnable.ended(run_id, outcome.error, self.live.log(run_id))  # a store error?
        dropped = self.live.drop(run_id, outcome)
        if not isinstance(outcome, OwnedOutcome):
            return
        # The claim is given up before anyone sees the result (OwnedOutcome.wait), unless
        # an abandoned attempt still runs here: then it is kept until that ends (draining),
        # so no other process runs the node meanwhile.
        if dropped and self.ownership is not None and self._tasks is not None:
            if not self.drains.keep(run_id, outcome, self._tasks.start_soon):
                self.ownership.release_soon(run_id, self._tasks, outcome.released)
        else:
            outcome.released()

    def ending(self, run_id: str, expected_seq: int) -> None:
        """A run launched here is about to hand its final batch to the store, at
        ``expected_seq``, with none of its nodes running (its outcome's ``ending``): its
        claim goes with that batch where the store can, given up in the batch's
        transaction if the batch is written, unless an abandoned attempt of the run still
        runs here (then :meth:`forget` keeps it, draining)."""
        if self.ownership is not None and run_id not in self.draining:
            self.ownership.release_with_append(run_id, expected_seq)

    def conflict(self, run_id: str, error: BaseException) -> None:
        """A run launched here met another writer's events (its outcome's ``on_conflict``);
        a start's first append meeting them: a run of that id is in the store already."""
        started = self.starting.get(run_id)
        unstarted = started is not None and not started.done()
        if self._tasks is None:
            self._start_answered(run_id)
            return
        # A start is answered once its refusal is settled (_settled), not now: a control
        # right after it must not meet the refused run as if live here.
        self._tasks.start_soon(self._settled, run_id, error, unstarted)

    async def _settled(self, run_id: str, error: BaseException | None, unstarted: bool) -> None:
        try:
            await self._settle(run_id, error, unstarted)
        finally:
            self._start_answered(run_id)  # (done already if the outcome was: see forget)

    @asynccontextmanager
    async def acting_on(self, run_id: str) -> AsyncIterator[None]:
        """Hold ``run_id`` for a control action that may launch it (a resume, a gate's
        decision, a named start): one at a time here (``actions``); refused once the
        runtime's closing began, which waits for it (``closing.acting``)."""
        with self.closing.acting():
            async with self.actions.acting_on(run_id):
                yield

    async def ready_to_resume(self, run_id: str) -> None:
        """Before a resume here: an abandoned attempt of the run here ends first."""
        await self.drains.ready_to_resume(run_id)

    # ------------------------------------------------------------------ control

    async def result(self, run_id: str) -> RunResult:
        check_not_own_run(run_id)
        live = self.live.get(run_id)
        if live is not None:
            result: RunResult = await live.outcome.wait()
            return result
        return result_from_state(await self.logs.get_state(run_id))

    async def pause(self, run_id: str) -> None:
        live = self.live.active(run_id)
        if live is None and self.ownership is not None:
            await self.control_elsewhere(run_id, "pause")
            return
        if live is None:
            # As a store's runtime answers (RunNotFoundError for a run it never saw).
            state = await self.logs.get_state(run_id)
            raise RunChangedError(run_id, state.status, "only a running run can pause")
        await live.executor.tell(PauseRun())

    async def cancel(self, run_id: str, reason: str) -> None:
        live = self.live.active(run_id)
        if live is not None:
            await live.executor.tell(CancelRun(reason=reason))
            return
        await self.control_elsewhere(run_id, "cancel", reason=reason)

    async def inject_input(self, run_id: str, data: dict[str, Any]) -> None:
        if not await inject_live(self.live, run_id, data):  # its executor's, or the log's
            await self.control_elsewhere(run_id, "inject", data=data)

    # ------------------------------------------------------------------ closing

    async def release_all(self) -> None:
        """Closing, once the actors have stopped: give up every claim held here."""
        if self.ownership is not None:
            for run_id in list(self.ownership.claims):
                await self.ownership.release(run_id)

    # ------------------------------------------------------------------ ownership

    def _not_to_claim(self) -> list[str]:
        """Runs recovery passes over: those this worker cannot execute for now, and those
        whose executor is still here (claiming one would only give it up again)."""
        assert self.unrunnable is not None
        return [*self.unrunnable.excluded(), *self.live.ids()]

    def _room(self) -> int:
        assert self.recover_concurrency is not None
        return self.recover_concurrency - len(self.live)

    async def _resume_claimed(self, run_id: str) -> None:
        """Continue a run this runtime just claimed (recovery); give it up if it turns
        out to have nothing to run, or if its previous executor here is still stopping
        (its lease ran out under load, say): a later round claims it again. Whatever
        else goes wrong is logged and the claim given up, so recovery itself goes on."""
        assert self.ownership is not None
        if self.live.running_here(run_id):
            _log.warning("run %s: claimed for recovery while its executor here stops", run_id)
            await self.ownership.release(run_id)
            return
        assert self.unrunnable is not None
        try:
            await self._resume(run_id, None)  # its end forgets its wait, or doubles it (forget)
        except SpecErrors as exc:
            # A graph this worker cannot execute: recorded, given up, left for a while.
            await self.unrunnable.refused(run_id, exc)
            await self.ownership.release(run_id)
        except (RunNotFoundError, RunStateError) as exc:
            _log.warning("run %s: claimed for recovery but not resumed: %s", run_id, exc)
            await self.ownership.release(run_id)
        except StoreError as exc:
            # The store failed under it (a full disk, a lost connection): said once, and
            # left for a while as an unrunnable run is.
            self.unrunnable.failed(run_id, exc)
            await self.ownership.release(run_id)
        except Exception:
            _log.exception("run %s: claimed for recovery, resuming it failed", run_id)
            await self.ownership.release(run_id)

    async def _on_lease_lost(self, run_id: str) -> None:
        live = self.live.get(run_id)
        if live is None:
            return
        outcome = live.outcome
        if isinstance(outcome, OwnedOutcome):
            outcome.holding = True
        await live.executor.stop()
        self.live.drop(run_id)
        error = LeaseLostError(run_id, None, None, None)
        if isinstance(outcome, OwnedOutcome):
            outcome.fail_now(error)
        else:
            outcome.fail(error)

    async def _on_foreign_events(self, run_id: str) -> None:
        live, log = self.live.get(run_id), self.live.log(run_id)
        if live is None or log is None:
            return
        outcome = live.outcome  # (its hooks drop it once it is done)
        if isinstance(outcome, OwnedOutcome) and not outcome.done:
            if await take_in_foreign(log) != "other":
                return  # pause requests and input taken in (or looked at again)
            outcome.holding = True
            await self._settle(run_id, None)

    async def _settle(
        self, run_id: str, error: BaseException | None, unstarted: bool = False
    ) -> None:
        """Stop the run's executor here and continue from its log (or, closing, end it as
        the close ends the live runs): another process appended to it (a cancel, input it
        could not take in), or the claim was lost. ``unstarted``: a start whose first
        append met a run already stored under its id, which is not this start's to resume
        or report: it fails with RunStateError, having done nothing."""
        live = self.live.get(run_id)
        if live is None:
            return
        outcome = live.outcome
        assert isinstance(outcome, OwnedOutcome)
        await live.executor.stop()
        if isinstance(error, LeaseLostError) or (
            self.ownership is not None and run_id not in self.ownership.claims
        ):
            _log.warning("run %s: its claim was lost (%s); stopped here", run_id, error)
            self.live.drop(run_id)
            outcome.fail_now(error or LeaseLostError(run_id, None, None, None))
            return
        try:
            state = await self.logs.get_state(run_id)
            if unstarted:
                why = "a run with this id is already in the store (resume or fork it instead)"
                outcome.fail_now(RunStateError(run_id, state.status, why))
                return
            if state.status == "running":
                try:
                    await self._resume(run_id, outcome)
                    return
                except RunStateError as exc:
                    if not self.closing.refused(exc):
                        raise
                # Not continued here: ended as the close ends the runs live here.
                error = await self.closing.unlaunched(run_id)
                state = await self.logs.get_state(run_id)
                if state.status == "running":
                    outcome.fail_now(error)
                else:
                    outcome.set(result_from_state(state))
                return
            ended: RunCancelled | None = None
            if state.status == "cancelled" and self.ownership and self.ownership.holds(run_id):
                # Another process cancelled the run executing here: observed (counted,
                # logged) here, not there (_elsewhere.py).
                ended = await cancellation(self.logs, run_id, state)
            if outcome.done:
                return  # settled meanwhile
            if ended is not None:
                for observer in self.logs.observers:
                    observer(run_id, (ended,), None)
            if not outcome.acted:
                # A resume whose first append lost to another writer: it did nothing, and
                # its caller learns what happened instead of a status it did not make.
                why = "another writer moved it before this resume acted"
                outcome.fail_now(RunChangedError(run_id, state.status, why))
                return
            outcome.set(result_from_state(state))
        except Exception as exc:
            outcome.fail_now(exc)
