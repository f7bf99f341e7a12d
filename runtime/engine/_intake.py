"""Input for a run live here (``Runtime.inject_input``): taken or refused at once, in the
caller's task, then recorded by the run's executor in the order given.

A message alone cannot answer the caller: the executor handles it later, by when the run's
walk may be over (its goal being scored reads memory as the run ended, so input recorded
then would be scored against stale memory; a run that paused or ended records nothing
more), and an ask would wait for the executor, which a commit hook awaited in the
executor's own task must not. So the input waits in the run log's :class:`Intake`, the
executor is told to record it (``InjectInput``: the oldest waiting), and every end of the
run's walk records what waits first, then closes the intake (:func:`close`): the input
given after that is refused there and then, with why, or (the run pausing or cancelled)
appended to its log once the end is recorded, as to any run at rest. :data:`RECORDING`
names the run whose end the current task records: a commit hook it awaits runs in it, and
waiting there for that end would wait for itself.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Literal, Protocol

from eventstore import EventBody

from ..events._catalogue import InputInjected

__all__ = ["RECORDING", "Closed", "Intake", "close", "give", "record_next", "withdraw"]

#: Why a run's intake takes no more input: its goal is being scored, or its walk ended (a
#: pause, a cancel or its end is being recorded).
Closed = Literal["scoring", "ended"]


class Intake:
    """The input given to one live run and not yet recorded, and whether it takes more."""

    __slots__ = ("closed", "waiting")

    def __init__(self, closed: Closed | None = None) -> None:
        #: None while the run takes input; else why it does not.
        self.closed = closed
        self.waiting: list[dict[str, Any]] = []


class RunLog(Protocol):
    """What of a run's log (engine/_runlog.py, which holds its intake) this module uses."""

    intake: Intake | None

    def stage(self, body: EventBody, then: EventBody | None = None) -> None: ...


#: The run whose end (a pause, a cancel, its finish) this task is recording (RunEnding.record).
RECORDING: ContextVar[str | None] = ContextVar("magistrate_recording_end", default=None)

#: The closed intakes, shared: a run that never gets input makes none of its own.
_CLOSED: dict[Closed, Intake] = {"scoring": Intake("scoring"), "ended": Intake("ended")}


def give(log: RunLog, data: dict[str, Any]) -> Closed | None:
    """Leave ``data`` for the executor of ``log``'s run to record (then tell it
    ``InjectInput``), and return None; or, taking nothing, why the run takes no input."""
    intake = log.intake
    if intake is None:
        intake = log.intake = Intake()
    if intake.closed is None:
        intake.waiting.append(data)
    return intake.closed


def withdraw(log: RunLog, data: dict[str, Any]) -> bool:
    """Take back ``data`` (the very object given) if it still waits (its executor stopped
    before recording it); False if it does not (it was recorded)."""
    intake = log.intake
    if intake is not None:
        for at, waiting in enumerate(intake.waiting):
            if waiting is data:
                del intake.waiting[at]
                return True
    return False


def record_next(log: RunLog) -> bool:
    """Stage the oldest input waiting, if any (the executor commits it); True if one was."""
    intake = log.intake
    if intake is None or not intake.waiting:
        return False
    log.stage(InputInjected(data=dict(intake.waiting.pop(0))))
    return True


def close(log: RunLog, why: Closed) -> None:
    """The run's walk is over: stage every input waiting (before the event that ends the
    walk), then take no more, for ``why``."""
    while record_next(log):
        pass
    log.intake = _CLOSED[why]
