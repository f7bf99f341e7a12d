"""Runs a worker claimed and cannot execute: their reasons recorded once, their retries
backed off.

A worker's graph check (functions, tools, judges, providers, allowed imports) can refuse a
run that another worker, configured otherwise, executes. Such a run is recorded with one
``run.unrunnable`` event per distinct reason (whoever records it first; a reason already
in the log is not recorded again), its claim is given up, and this worker leaves it out of
its claims for a while: first ``FIRST_DELAY`` seconds, doubling on each refusal up to
``MAX_DELAY``. The run stays running, so any worker may take it meanwhile.
"""

from __future__ import annotations

import logging
import time

from eventstore import ConcurrencyError, StoreError

from .._errors import SpecErrors
from .._run_logs import RunLogs
from ..events._catalogue import RunUnrunnable

__all__ = ["FIRST_DELAY", "MAX_DELAY", "Unrunnable"]

_log = logging.getLogger("magistrate.runtime")

#: Seconds a worker leaves a run it could not execute before claiming it again, at first.
FIRST_DELAY = 1.0
#: The longest such wait: a worker whose configuration changed meanwhile (a restart
#: with the missing option) is not concerned, but a run whose module appears later is.
MAX_DELAY = 60.0


class Unrunnable:
    """The runs ``worker`` could not execute, with when it may claim each again."""

    def __init__(self, logs: RunLogs, worker: str) -> None:
        self.logs = logs
        self.worker = worker
        #: run id -> (monotonic time it may be claimed again, the delay that set it)
        self._waits: dict[str, tuple[float, float]] = {}
        #: (run id, reason) pairs this process has logged, so a retry logs nothing new.
        self._logged: set[tuple[str, str]] = set()

    def excluded(self) -> list[str]:
        """The runs not to claim now (their wait has not passed)."""
        now = time.monotonic()
        return [run_id for run_id, (until, _) in self._waits.items() if until > now]

    def executed(self, run_id: str) -> None:
        """The run could be executed here after all: forget its wait."""
        self._waits.pop(run_id, None)

    async def refused(self, run_id: str, error: SpecErrors) -> None:
        """Record the reasons of ``error`` the run's log does not hold yet (as one batch,
        under the claim the caller still holds), log each reason once per process, and
        start or double the run's wait. Store errors and a concurrent append are logged:
        the next refusal records what is missing then."""
        reasons = [str(e) for e in error.errors] or [str(error)]
        previous = self._waits.get(run_id)
        delay = FIRST_DELAY if previous is None else min(previous[1] * 2, MAX_DELAY)
        self._waits[run_id] = (time.monotonic() + delay, delay)
        for reason in reasons:
            if (run_id, reason) not in self._logged:
                self._logged.add((run_id, reason))
                _log.warning(
                    "run %s: this worker cannot execute it: %s; it stays waiting for a worker "
                    "that can (this one tries again after %.0f s, then less and less often)",
                    run_id,
                    reason,
                    delay,
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
