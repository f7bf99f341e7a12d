"""Runs a worker claimed and cannot execute for now: its graph check refuses them, or its
store fails under them. Their reasons are said once and their retries backed off.

A worker's graph check (functions, tools, judges, providers, allowed imports) can refuse a
run that another worker, configured otherwise, executes. Such a run is recorded with one
``run.unrunnable`` event per distinct reason (whoever records it first; a reason already
in the log is not recorded again), its claim is given up, and this worker leaves it out of
its claims for a while: first ``FIRST_DELAY`` seconds, doubling on each refusal up to
``MAX_DELAY``. The run stays running, so any worker may take it meanwhile.

A run whose execution here ends on a store error (a full disk refusing a node's output,
say; not another writer's events or a lost claim, which are settled from the log) is
claimed again at once the first time (a dropped connection the store reconnects is gone
by then); when it fails again with no progress, it is left out the same way, the delay
doubling on each such end: nothing can be recorded reliably on a failing store, so the
run stays running, and a worker whose store works may take it meanwhile. Its wait is
forgotten once an execution here ends otherwise, or gets past the failure (starts a node
the failed one did not reach).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from eventstore import ConcurrencyError, LeaseLostError, StoreError

from .._errors import SpecErrors
from .._run_logs import RunLogs
from ..events._catalogue import RunUnrunnable

if TYPE_CHECKING:
    from ..engine._runlog import RunLog

__all__ = ["FIRST_DELAY", "MAX_DELAY", "Unrunnable"]

_log = logging.getLogger("magistrate.runtime")

#: Seconds a worker leaves a run it could not execute before claiming it again, at first.
FIRST_DELAY = 1.0
#: The longest such wait: a worker whose configuration changed meanwhile (a restart
#: with the missing option) is not concerned, but a run whose module appears later is.
MAX_DELAY = 60.0

#: Store errors that are no failure of the store: settled from the run's log.
_SETTLED = (ConcurrencyError, LeaseLostError)


class _Wait:
    """How long a run is left out of this worker's claims, and why."""

    __slots__ = ("delay", "error", "steps", "until")

    def __init__(self, delay: float) -> None:
        #: Seconds it waits (0: a first store failure, claimed again at once).
        self.delay = delay
        #: Monotonic time it may be claimed again.
        self.until = time.monotonic() + delay
        #: The store error of the run's last failed execution here (None: a refusal).
        self.error: StoreError | None = None
        #: How many node visits the run had started at that failure (its progress).
        self.steps = 0


class Unrunnable:
    """The runs ``worker`` could not execute, with when it may claim each again."""

    def __init__(self, logs: RunLogs, worker: str) -> None:
        self.logs = logs
        self.worker = worker
        #: run id -> its wait
        self._waits: dict[str, _Wait] = {}
        #: (run id, reason) pairs this process has logged, so a retry logs nothing new.
        self._logged: set[tuple[str, str]] = set()

    def excluded(self) -> list[str]:
        """The runs not to claim now (their wait has not passed)."""
        now = time.monotonic()
        return [run_id for run_id, wait in self._waits.items() if wait.until > now]

    def executed(self, run_id: str) -> None:
        """The run could be executed here after all: forget its wait."""
        self._waits.pop(run_id, None)

    def _wait(self, run_id: str, previous: _Wait | None) -> _Wait:
        """Start the run's wait, or double it."""
        if previous is None or not previous.delay:
            delay = FIRST_DELAY
        else:
            delay = min(previous.delay * 2, MAX_DELAY)
        wait = self._waits[run_id] = _Wait(delay)
        return wait

    def ended(self, run_id: str, error: BaseException | None, log: RunLog | None) -> None:
        """The run's execution here ended (``error``: what it failed with, if it did;
        ``log``: its log, if still at hand): a store error leaves it for a while
        (:meth:`failed`), any other end forgets its wait."""
        if isinstance(error, StoreError) and not isinstance(error, _SETTLED):
            self.failed(run_id, error, None if log is None else log.state.steps)
        else:
            self.executed(run_id)

    def failed(self, run_id: str, error: StoreError, steps: int | None = None) -> None:
        """The store failed under the run's execution (or its resume) here, having started
        ``steps`` node visits (None: unknown). A first failure may be a blip (a dropped
        connection the store reconnects): the run is claimed again at once. One that
        follows it with no progress starts or doubles the run's wait, said once when it
        starts. The same error told twice (by its executor, then its resume) counts once;
        an execution that got further fails anew. Another writer's events or a lost claim
        are only logged: the run's log settles them."""
        if isinstance(error, _SETTLED):
            _log.warning("run %s: claimed for recovery, not resumed: %s", run_id, error)
            return
        previous = self._waits.get(run_id)
        if previous is not None and previous.error is error:
            return
        if previous is not None and previous.error is not None and (steps or 0) > previous.steps:
            previous = None  # it got past the last failure: this is a new one
        if previous is None:
            wait = self._waits[run_id] = _Wait(0.0)
        else:
            wait = self._wait(run_id, previous)
            if not previous.delay or previous.error is None:
                _log.warning(
                    "run %s: the store failed under it here: %s; it stays running, waiting "
                    "for a worker (this one tries it again after %.0f s, then less and less "
                    "often)",
                    run_id,
                    error,
                    wait.delay,
                )
        wait.error = error
        wait.steps = max(steps or 0, 0 if previous is None else previous.steps)

    async def refused(self, run_id: str, error: SpecErrors) -> None:
        """Record the reasons of ``error`` the run's log does not hold yet (as one batch,
        under the claim the caller still holds), log each reason once per process, and
        start or double the run's wait. Store errors and a concurrent append are logged:
        the next refusal records what is missing then."""
        reasons = [str(e) for e in error.errors] or [str(error)]
        wait = self._wait(run_id, self._waits.get(run_id))
        for reason in reasons:
            if (run_id, reason) not in self._logged:
                self._logged.add((run_id, reason))
                _log.warning(
                    "run %s: this worker cannot execute it: %s; it stays waiting for a worker "
                    "that can (this one tries again after %.0f s, then less and less often)",
                    run_id,
                    reason,
                    wait.delay,
                )
        try:
            state = await self.logs.get_state(run_id)
            new = [r for r in dict.fromkeys(reasons) if r not in state.unrunnable]
            if new and state.status == "running":
                bodies = [RunUnrunnable(reason=r, worker=self.worker) for r in new]
                await self.logs.reopen(run_id, state.last_seq).append(list(bodies))
        except ConcurrencyError:
            pass  # appended to meanwhile: recorded at its next refusal if still missing
        except StoreError as exc:
            _log.warning("run %s: recording why it cannot run here failed: %s", run_id, exc)
