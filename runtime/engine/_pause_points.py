"""Where a run pauses: the nodes held at a pause point until nothing else runs."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ..events._catalogue import PauseReason, PauseRequested
from ..events._state import RunState
from ._runlog import RunLog

__all__ = ["PausePoints"]

_NONE: frozenset[str] = frozenset()


class PausePoints(msgspec.Struct, gc=False):
    """The nodes of one run held before they start (a pause node, a pause asked for, a
    node waiting for input), and those a resume lets through without pausing again.

    A pause asked for is a ``run.pause_requested`` in the run's log, whoever asked: this
    process (:meth:`request`) or another (taken into the live state, see _foreign.py).
    While ``state.pause_requested``, the next node to start is held, so the run pauses at
    the next node boundary, once the nodes running now have finished, the same from
    every front and process.

    Untracked by the cyclic collector (``gc=False``): it holds only strings, in frozensets
    and tuples, so it can never be part of a reference cycle; the run's log and state are
    passed to the methods that need them."""

    #: The graph's pause nodes.
    pause_nodes: frozenset[str]
    #: (node, branch, why), the first being the pause's resume point. Tuples and a
    #: frozenset, replaced when they change: most runs never hold or pass a node, and
    #: then make no container of their own here.
    held: tuple[tuple[str, str | None, PauseReason], ...] = ()
    passed: frozenset[str] = _NONE

    def request(self, log: RunLog) -> bool:
        """Record a pause asked for in this process (staged for the executor's commit);
        False if one is asked for already (the run pauses once)."""
        if log.state.pause_requested:
            return False
        log.stage(PauseRequested())
        return True

    def hold(self, state: RunState, node_id: str, branch: str | None, attempt: int) -> bool:
        """Whether ``node_id``'s attempt is held instead of starting (``state``: the
        run's live state)."""
        if attempt == 1 and node_id not in self.passed:
            if state.pause_requested:
                self.held = (*self.held, (node_id, branch, "user"))
            elif node_id in self.pause_nodes:
                self.held = (*self.held, (node_id, branch, "hitl"))
            if self.held and self.held[-1][0] == node_id:
                return True
        if node_id in self.passed:
            self.passed = self.passed - {node_id}
        return False

    def held_elsewhere(
        self, node_id: str, branch: str | None, running: dict[str, tuple[int, str | None]]
    ) -> None:
        """A pause from another process held ``node_id``'s start (it was not recorded and
        the node does not run, see _foreign.py): it waits here, as one held by
        :meth:`hold`; the run pauses once nothing else runs."""
        running.pop(node_id, None)
        self.held = (*self.held, (node_id, branch, "user"))

    def wait_for_input(self, node_id: str, branch: str | None) -> None:
        """``node_id`` stopped to wait for input: the pause resumes it (it runs again)."""
        self.held = ((node_id, branch, "input"), *self.held)

    def resume(
        self, due: Iterable[str], unfinished: set[str], state: RunState, *, fork: bool
    ) -> None:
        """A resume answers the run's pause (or continues from its cancel's resume point,
        or after a crash): the nodes due run now without pausing again, except a pause
        node no approval opened, which waits at its gate again (only an approval passes a
        gate; a rejected one fails instead, see the executor). A ``fork`` from the middle
        of a run passes only the nodes that had started, so a node that had not reached
        its pause gate meets it now."""
        pending = set(due)
        passed = unfinished | (pending & set(state.approved)) if fork else pending
        closed = self.pause_nodes - unfinished - set(state.approved) - set(state.rejected)
        self.passed = frozenset(passed - closed)
