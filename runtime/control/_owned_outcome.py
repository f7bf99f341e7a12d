"""The outcome of a run executed under a claim: store conflicts are settled before anyone
sees them, and the result is delivered once the claim is given up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from actors import Waiter, new_waiter

from .._result import RunOutcome, RunResult

__all__ = ["RELEASE_WAIT", "OwnedOutcome"]

#: How long a run's result waits for its claim's release before it is delivered anyway.
RELEASE_WAIT = 5.0


class OwnedOutcome(RunOutcome):
    """A run's outcome that lets the runtime settle store conflicts before anyone sees them.

    When the executor fails on a store conflict (another process appended to the run, or
    the claim was lost), ``on_conflict`` is called instead of failing the outcome: the
    runtime stops the executor and continues from the log. While ``holding`` (the runtime
    is stopping the executor on purpose), failures are ignored.

    Its result is delivered once the run's claim here is given up (:meth:`released`), so
    whoever sees it can act on the run at once (resume it elsewhere, say) without meeting
    this runtime's claim; at the latest ``RELEASE_WAIT`` seconds after it is done (a store
    that does not answer leaves the claim to expire).
    """

    __slots__ = ("_answered", "_answers", "_released", "_timer", "acted", "holding", "on_conflict")

    def __init__(
        self,
        on_done: Callable[[], None] | None,
        on_conflict: Callable[[BaseException], None],
    ) -> None:
        super().__init__(on_done)
        self.on_conflict = on_conflict
        self.holding = False
        #: Whether an executor of this outcome committed anything: a resume whose first
        #: append met another writer's events did nothing, and says so (RunChangedError).
        self.acted = False
        self._released = False
        self._timer: asyncio.TimerHandle | None = None  # RELEASE_WAIT, while it runs
        self._answered = False  # it acted or is done (see answered)
        self._answers: tuple[Waiter, ...] = ()  # answered()'s waiters

    def committed(self, _run_id: str, _bodies: object, _elapsed: float | None) -> None:
        """A commit observer: this outcome's run has acted."""
        self.acted = True
        self._answer_all()

    def _answer_all(self) -> None:
        if not self._answered:
            self._answered = True
            answers, self._answers = self._answers, ()
            for waiter in answers:
                if not waiter.done():
                    waiter.set_result(None)

    def _done(self) -> None:
        self._answer_all()
        super()._done()
        if not self._released:
            self._bound_release_wait()

    def _deliverable(self) -> bool:
        return self.done and self._released

    def wait(self) -> Awaitable[RunResult]:
        waited = super().wait()
        if self.done and not self._released:
            self._bound_release_wait()
        return waited

    def _bound_release_wait(self) -> None:
        """Deliver the result RELEASE_WAIT seconds from now if the release has not come
        by then (only while someone waits for it)."""
        if self._timer is not None or self._callers is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: its waits are not bounded
            return
        self._timer = loop.call_later(RELEASE_WAIT, self._release_waited)

    def _release_waited(self) -> None:
        self._timer = None
        self._deliver()

    async def answered(self) -> None:
        """Wait until an executor of this outcome committed something (it acted) or the
        outcome is done: a resume returns its handle only then, so a resume whose first
        append lost to another writer raises instead of returning a stale handle."""
        if self._answered:
            return
        waiter = new_waiter()
        self._answers = (*self._answers, waiter)
        await waiter

    def fail(self, error: BaseException) -> None:
        if self.done or self.holding:
            return
        from eventstore import ConcurrencyError, LeaseLostError

        if isinstance(error, (ConcurrencyError, LeaseLostError)):
            self.holding = True
            self.on_conflict(error)
            return
        super().fail(error)

    def ending(self, expected_seq: int) -> None:
        """The run's final batch is about to go to the store at ``expected_seq``, none of
        its nodes running: its claim may go with it (RunControl.ending, through the
        ``on_conflict`` hooks when they take it)."""
        ending = getattr(self.on_conflict, "ending", None)
        if ending is not None:
            ending(expected_seq)

    def fail_now(self, error: BaseException) -> None:
        """Fail the outcome whatever it is holding for."""
        self.holding = False
        super().fail(error)

    def released(self) -> None:
        """The run's claim here is given up (or was not held): its result may be seen."""
        if self._released:
            return
        self._released = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self.done:
            self._deliver()
