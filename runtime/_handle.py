"""What ``Runtime.start``, ``resume``, ``approve`` and ``fork`` return: a run's handle."""

from __future__ import annotations

from ._result import RunOutcome, RunResult

__all__ = ["RunHandle"]


class RunHandle:
    """A started (or resumed) run in this process."""

    def __init__(self, run_id: str, outcome: RunOutcome) -> None:
        self.run_id = run_id
        self._outcome = outcome

    async def result(self) -> RunResult:
        """Wait until the run completes, fails, pauses or is cancelled; return its result.

        Raises whatever stopped the executor itself (a store error, for instance).
        Cancelling the wait does not affect the run.
        """
        return await self._outcome.wait()
