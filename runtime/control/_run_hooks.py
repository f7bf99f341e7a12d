"""What a live run's log and outcome call back into the run control with, as one slotted
object each: a partial of a bound method is two objects, a closure a function with its
cells and their tuple, and every one of them is held for the whole run, walked by the
cyclic collector each time it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from actors import Waiter

__all__ = ["Conflict", "Drain", "Drained", "Forget", "Holds"]


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


class Forget:
    """An outcome's ``on_done``: RunControl.forget(run_id, started, outcome). The outcome
    drops it once called, which ends the cycle between them."""

    __slots__ = ("control", "outcome", "run_id", "started")

    def __init__(self, control: Any, run_id: str, started: Waiter | None) -> None:
        self.control = control
        self.run_id = run_id
        self.started = started
        self.outcome: Any = None  # set once the outcome is made

    def __call__(self) -> None:
        self.control.forget(self.run_id, self.started, self.outcome)


class Conflict:
    """An owned outcome's ``on_conflict``: RunControl.conflict(run_id, started, error).
    It holds no outcome, so no cycle outlives the run."""

    __slots__ = ("control", "run_id", "started")

    def __init__(self, control: Any, run_id: str, started: Waiter | None) -> None:
        self.control = control
        self.run_id = run_id
        self.started = started

    def __call__(self, error: BaseException) -> None:
        self.control.conflict(self.run_id, self.started, error)
