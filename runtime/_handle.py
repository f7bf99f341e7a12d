"""What ``Runtime.start``, ``resume``, ``approve`` and ``fork`` return: a run's handle."""

from __future__ import annotations

from collections.abc import AsyncIterator

from eventstore import Event

from ._result import RunOutcome, RunResult
from ._run_logs import RunLogs
from .control._own_run import check_not_own_run
from .control._watch import follow_run

__all__ = ["RunHandle"]


class RunHandle:
    """A started (or resumed) run in this process."""

    __slots__ = ("_logs", "_outcome", "_since", "run_id")

    def __init__(self, run_id: str, outcome: RunOutcome, logs: RunLogs, since: int) -> None:
        self.run_id = run_id
        self._outcome = outcome
        self._logs = logs
        self._since = since

    async def result(self) -> RunResult:
        """Wait until the run completes, fails, pauses or is cancelled; return its result.

        Raises whatever stopped the executor itself (a store error, for instance), and
        RunStateError at once in a node of this run (it would wait for its own end).
        Cancelling the wait does not affect the run.
        """
        check_not_own_run(self.run_id)
        # The outcome's own waiter, awaited here: no coroutine of the outcome's waits.
        return await self._outcome.wait()

    def events(self, *, from_seq: int = 1) -> AsyncIterator[Event]:
        """The run's committed events from seq ``from_seq`` (1: from its start), in seq
        order, each as soon as it is read after its commit.

        Ends after the event that finishes, cancels or pauses the run in this launch
        (``run.finished``, ``run.cancelled``, ``run.paused``; a pause recorded before a
        resume does not end it); or, if the run stops here without one (its claim lost
        to another process, a store error), once every committed event is yielded. Each
        call is a new iterator; several may follow one run. Waiting blocks on the run's
        executor and on the store (read again every few tens of milliseconds, so events
        another process appends are seen too); breaking out or cancelling the iteration
        does not affect the run. Raises the store's read errors, and RunStateError at
        once in a node of this run (it would follow the run to its end, which waits for
        the node): such a node reads what is committed with ``Runtime.read_events``.
        """
        return follow_run(
            self._logs, self.run_id, from_seq, since=self._since, outcome=self._outcome
        )
