"""Fan-out bookkeeping: the convergence node, and the working set of an open fan-out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..events._fanout import BranchStatus, OpenFanOut
from ..spec._model import GraphSpec

__all__ = ["ConflictStrategy", "FanOut", "convergence_node", "resumed_fanout"]

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


def convergence_node(graph: GraphSpec, starts: list[str]) -> str | None:
    """The nearest node reachable from every branch start (None if the branches never meet).

    "Nearest" minimises the longest branch's distance, then declaration order.
    """
    order = {node.id: i for i, node in enumerate(graph.nodes)}
    distances: list[dict[str, int]] = []
    for start in starts:
        seen = {start: 0}
        frontier = [start]
        while frontier:
            nxt: list[str] = []
            for node in frontier:
                for _, edge in graph.outgoing(node):
                    if edge.target not in seen:
                        seen[edge.target] = seen[node] + 1
                        nxt.append(edge.target)
            frontier = nxt
        distances.append(seen)
    # A start that another branch reaches is itself the join (a diamond with a shortcut).
    common = set(distances[0]).intersection(*distances[1:])
    if not common:
        return None
    return min(common, key=lambda n: (max(d[n] for d in distances), order.get(n, 0)))


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
