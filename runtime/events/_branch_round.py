"""The parallel round a node has in progress, as the event log makes it: what it resumes from.

A parallel LLM node (see ``runtime.llm._parallel``) runs its rounds of branches one at a
time. The run-state fold keeps, in the node's :class:`~runtime.events._node_visit.NodeVisit`, the
records of its latest round (:class:`BranchRound`), applied by
:func:`runtime.events._state.apply` like every other part of the state, so a round rerun after a
crash or a cancel starts from the state instead of reading the log:

- a ``branch.turn``, ``branch.tool_result``, ``branch.finished``, ``branches.judged`` or
  ``branches.selected`` event of the node's current visit belongs to the round its
  ``round`` names; one of another round than the one held starts a new record (rounds of
  a visit follow one another, so the held one is over);
- the node's own ``llm.turn`` past the round's number (the winner's turns, committed with
  the selection) ends the round: nothing of it is needed any more;
- a new visit of the node starts with no round.

So the state holds at most one round per node, never the rounds of the whole run.
"""

from __future__ import annotations

import msgspec

from ._catalogue import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
)

__all__ = ["BranchEvent", "BranchRound"]

#: The events that make up a round's record.
BranchEvent = BranchTurn | BranchToolResult | BranchFinished | BranchesJudged | BranchesSelected


class BranchRound(msgspec.Struct, kw_only=True):
    """One parallel round's records, in log order (see the module docstring)."""

    #: The node's turn count when the round began (the events' ``round``).
    round: int
    #: Every branch's turns, in log order.
    turns: list[BranchTurn] = []
    #: Every branch's tool results, in log order.
    results: list[BranchToolResult] = []
    #: The branches' ends in the order they finished (a branch's rank is its place here).
    finished: list[BranchFinished] = []
    #: The ``llm_judge`` strategy's last recorded call, and the round's last selection.
    judged: BranchesJudged | None = None
    selected: BranchesSelected | None = None

    def copy(self) -> BranchRound:
        """An independent copy (the events are immutable and shared)."""
        return BranchRound(
            round=self.round,
            turns=list(self.turns),
            results=list(self.results),
            finished=list(self.finished),
            judged=self.judged,
            selected=self.selected,
        )

    def record(self, body: BranchEvent) -> None:
        """Add one event of this round."""
        match body:
            case BranchTurn():
                self.turns.append(body)
            case BranchToolResult():
                self.results.append(body)
            case BranchFinished():
                self.finished.append(body)
            case BranchesJudged():
                self.judged = body
            case BranchesSelected():
                self.selected = body
