"""The runs live in one runtime: each one's executor, outcome and log."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from actors import ActorRef, ActorSystem

from .._result import RunOutcome
from ..engine._runlog import RunLog
from ._run_hooks import RunHooks

__all__ = ["LiveRun", "LiveRuns"]

#: A run whose executor runs here: its hooks (control/_run_hooks.py), which hold its
#: ``executor`` and ``outcome`` while it is live (one object per run, not two).
LiveRun = RunHooks


class LiveRuns:
    """The runs whose executors run in ``system``, by run id. A run is live from its
    launch until its outcome is done (or the runtime stops it); a stopped run is read back
    from its log, so nothing keeps a reference to it here. ``on_drop`` is called with the
    id of each run forgotten (its executor no longer runs it here, whatever the reason).

    Each run's entry is its :class:`RunHooks` (its executor and outcome) and, beside it,
    its log (:meth:`log`)."""

    def __init__(self, system: ActorSystem, on_drop: Callable[[str], None] | None = None) -> None:
        self.system = system
        self._runs: dict[str, LiveRun] = {}
        self._logs: dict[str, RunLog] = {}
        self._on_drop = on_drop

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[tuple[str, LiveRun]]:
        return iter(list(self._runs.items()))

    def get(self, run_id: str) -> LiveRun | None:
        return self._runs.get(run_id)

    def log(self, run_id: str) -> RunLog | None:
        """The log of the live run ``run_id``."""
        return self._logs.get(run_id)

    def active(self, run_id: str) -> LiveRun | None:
        """The live run ``run_id`` if its outcome is not done yet."""
        live = self._runs.get(run_id)
        return None if live is None or live.outcome.done else live

    def add(
        self, run_id: str, hooks: RunHooks, executor: ActorRef, outcome: RunOutcome, log: RunLog
    ) -> None:
        """Count ``run_id`` live here: ``executor`` runs it with ``log`` towards ``outcome``
        (``hooks``: its hooks, which hold the executor and the outcome from now on)."""
        hooks.executor = executor
        hooks.outcome = outcome
        self._runs[run_id] = hooks
        self._logs[run_id] = log

    def drop(self, run_id: str, outcome: RunOutcome | None = None) -> bool:
        """Forget ``run_id`` (only while its outcome is ``outcome``, if given); True if it
        was forgotten."""
        live = self._runs.get(run_id)
        if live is None or (outcome is not None and live.outcome is not outcome):
            return False
        del self._runs[run_id]
        del self._logs[run_id]
        if self._on_drop is not None:
            self._on_drop(run_id)
        return True

    def clear(self) -> None:
        dropped = list(self._runs)
        self._runs.clear()
        self._logs.clear()
        if self._on_drop is not None:
            for run_id in dropped:
                self._on_drop(run_id)

    def ids(self) -> list[str]:
        return list(self._runs)

    def heads(self) -> dict[str, int]:
        """Each live run's last seq submitted here."""
        return {run_id: log.last_seq for run_id, log in self._logs.items()}

    def running_here(self, run_id: str) -> bool:
        """True while the run is live here, or its executor here has not yet stopped."""
        return run_id in self._runs or self.system.has_actor(f"run:{run_id}")
