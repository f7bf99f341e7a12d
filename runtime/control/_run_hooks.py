"""What a live run's log and outcome call back into the run control with, and what the
run control knows of it while it is live, as one slotted object per run
(:class:`RunHooks`): a partial of a bound method is two objects, a closure a function with
its cells and their tuple, and every one of them is held for the whole run, walked by the
cyclic collector each time it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors import ActorRef

__all__ = ["RunHooks"]


class RunHooks:
    """One run's hooks into the run control ``control``, for its outcome and its log.

    Called with no argument, it is the outcome's ``on_done`` (RunControl.forget); with the
    error, an owned outcome's ``on_conflict`` (RunControl.conflict); :meth:`ending` is what
    an owned outcome's ``ending`` calls (RunControl.ending). It drops the outcome
    once the run is done, which ends the cycle between them (a conflict comes only
    before). As the log's ``run_hooks`` (engine/_runlog.py): :meth:`holds` whether the
    run's claim is still held here (RunOwnership.holds; no claims: always), and
    :meth:`drain` / :meth:`drained` count the run's node threads (control/_draining.py).
    While the run is live here, it is its entry in the runtime's live runs (LiveRuns):
    its ``executor`` and its ``outcome`` (its log is kept beside it there, not here: the
    log holds this object, and a cycle would outlive the run).
    """

    __slots__ = ("control", "executor", "outcome", "run_id")

    #: The run's executor here (set as it is launched: LiveRuns.add).
    executor: ActorRef

    def __init__(self, control: Any, run_id: str) -> None:
        self.control = control
        self.run_id = run_id
        self.outcome: Any = None  # set once the outcome is made

    def __call__(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.control.conflict(self.run_id, error)
            return
        outcome = self.outcome
        try:
            self.control.forget(self.run_id, outcome)  # its live entry: while it holds it
        finally:
            # Done: nothing is to reach its outcome or its executor through it any more (the
            # log it is the hooks of may be kept, an in-memory one, and hold it).
            self.outcome = None
            if hasattr(self, "executor"):
                del self.executor

    def ending(self, expected_seq: int) -> None:
        """The run's final batch is about to go to the store (RunControl.ending)."""
        self.control.ending(self.run_id, expected_seq)

    def holds(self) -> bool:
        """Whether the run's claim is still held here (True without claims)."""
        ownership = self.control.ownership
        return ownership is None or ownership.holds(self.run_id)

    def drain(self, node_id: str) -> Callable[[], None]:
        """A thread of a node of the run starts (DrainingRuns.begin): returns what to call
        once it ends."""
        done: Callable[[], None] = self.control.draining.begin(self.run_id, node_id)
        return done

    def drained(self, node_id: str, timeout: float | None) -> Awaitable[bool]:
        """Wait until no earlier attempt of the node runs (DrainingRuns.wait_node)."""
        waited: Awaitable[bool] = self.control.draining.wait_node(self.run_id, node_id, timeout)
        return waited
