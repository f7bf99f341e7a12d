"""Input for a run live here (``Runtime.inject_input``): given to its executor through its
log's intake (engine/_intake.py), so the caller learns at once whether the run took it."""

from __future__ import annotations

from typing import Any

from actors import ActorStoppedError

from .._errors import RunChangedError, RunStateError
from .._result import FINAL
from ..engine._intake import RECORDING, give, withdraw
from ..engine._messages import InjectInput
from ._live_runs import LiveRuns

__all__ = ["SCORING", "inject_live"]

#: Why input given while a run's goal is scored is refused (RunChangedError's reason).
SCORING = "the run is ending: its goal is being scored, so it takes no input (none was recorded)"


async def inject_live(live: LiveRuns, run_id: str, data: dict[str, Any]) -> bool:
    """Give ``data`` to ``run_id`` if it is live here: True once its executor has it to
    record (before anything ends the run's walk); False if no executor here takes it (none
    is live here, or the run paused or was cancelled meanwhile: then once that is recorded,
    the caller appends the input to its log as to any run not live here).

    Blocks only on the executor's mailbox space, and while the run's pause or cancel is
    being recorded. Raises RunChangedError, recording nothing, while the run's goal is
    scored (scoring reads memory as the walk ended) or once it is finishing ("already
    completed", as for a finished run); RunStateError when its executor stopped before
    recording it (its claim lost, say), or from a commit hook of the batch recording the
    run's pause or cancel (it would wait for itself): give it again once that is done."""
    run, log = live.active(run_id), live.log(run_id)
    if run is None or log is None:
        return False
    closed = give(log, data)
    if closed is None:
        try:
            await run.executor.tell(InjectInput())
        except ActorStoppedError:
            if withdraw(log, data):
                why = "its executor here stopped before recording the input: give it again"
                raise RunStateError(run_id, "running", why) from None
        return True
    if closed == "scoring":
        raise RunChangedError(run_id, "running", SCORING, already=False)
    status = log.state.status  # what the end being recorded leaves (applied as staged)
    if status in FINAL:
        raise RunChangedError(run_id, status, "cannot inject input into a finished run")
    if RECORDING.get() == run_id:
        why = f"it is being {status} by this task (a commit hook): give the input after it"
        raise RunStateError(run_id, "running", why)
    await run.outcome.settled()
    return False
