"""What a live run's log and outcome call back into the run control with, as one slotted
object each: a partial of a bound method is two objects, a closure a function with its
cells and their tuple, and every one of them is held for the whole run, walked by the
cyclic collector each time it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Drain", "Drained", "Holds", "OutcomeHooks"]


class Drain:
    """``log.drain``: a thread of a node of the run starts (DrainingRuns.begin)."""

    __slots__ = ("draining", "run_id")

    def __init__(self, draining: Any, run_id: str) -> None:
        self.draining = draining
        self.run_id = run_id

    def __call__(self, node_id: str) -> Callable[[], None]:
        done: Callable[[], None] = self.draining.begin(self.run_id, node_id)
        return done


class Drained:
    """``log.drained``: wait until no earlier attempt of a node runs (DrainingRuns.wait_node)."""

    __slots__ = ("draining", "run_id")

    def __init__(self, draining: Any, run_id: str) -> None:
        self.draining = draining
        self.run_id = run_id

    def __call__(self, node_id: str, timeout: float | None) -> Awaitable[bool]:
        waited: Awaitable[bool] = self.draining.wait_node(self.run_id, node_id, timeout)
        return waited


class Holds:
    """``log.holds``: whether the run's claim is still held here (RunOwnership.holds)."""

    __slots__ = ("ownership", "run_id")

    def __init__(self, ownership: Any, run_id: str) -> None:
        self.ownership = ownership
        self.run_id = run_id

    def __call__(self) -> bool:
        held: bool = self.ownership.holds(self.run_id)
        return held


class OutcomeHooks:
    """A run's outcome's ``on_done`` (called with no argument: RunControl.forget) and, for
    an owned outcome, its ``on_conflict`` (called with the error: RunControl.conflict):
    one object for both. It drops the outcome once the run is done, which ends the cycle
    between them (a conflict comes only before)."""

    __slots__ = ("control", "outcome", "run_id")

    def __init__(self, control: Any, run_id: str) -> None:
        self.control = control
        self.run_id = run_id
        self.outcome: Any = None  # set once the outcome is made

    def __call__(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.control.conflict(self.run_id, error)
            return
        outcome, self.outcome = self.outcome, None
        self.control.forget(self.run_id, outcome)
