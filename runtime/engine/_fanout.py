"""Fan-out bookkeeping: the working set of an open fan-out (its join is the graph's
``convergence_node``, runtime/spec/_branches.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..events._fanout import BranchStatus, OpenFanOut

__all__ = ["ConflictStrategy", "FanOut", "resumed_fanout"]

#: How memory writes of branches to one key are settled (GraphSpec.conflict_strategy).
ConflictStrategy = Literal["last_wins", "first_wins", "error"]


@dataclass(slots=True)
class FanOut:
    """What the executor decides from beyond the log's record of the fan-out
    (``RunState.fanout``, which holds the branches' writes): each branch's status as the
    walk sees it (a branch that ends with no edge is done, one whose node fails and takes
    an on_failure edge goes on), and (first_wins) the branch that claimed each key."""

    source: str
    join: str | None
    branches: dict[str, BranchStatus] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: first_wins: memory key -> the first branch to reach the join among those that wrote it.
    claims: dict[str, str] = field(default_factory=dict)


def resumed_fanout(fan: OpenFanOut, conflict_strategy: ConflictStrategy) -> FanOut:
    """The working set continuing ``fan``, the open fan-out of a resumed run's state.

    With ``first_wins`` each key goes to the first branch to reach the join among those
    that wrote it, as it did while the run went on.
    """
    live = FanOut(
        source=fan.source, join=fan.join, branches=dict(fan.branches), errors=dict(fan.errors)
    )
    if conflict_strategy == "first_wins":
        for branch in fan.arrived:
            for key in fan.values.get(branch, {}):
                live.claims.setdefault(key, branch)
    return live
