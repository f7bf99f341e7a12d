"""Fan-out bookkeeping: the convergence node, and continuing an open fan-out on a resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..events._fanout import BranchStatus, OpenFanOut
from ..spec._model import GraphSpec

__all__ = ["ConflictStrategy", "FanOut", "convergence_node", "resumed_fanout"]

#: How memory writes of branches to one key are settled (GraphSpec.conflict_strategy).
ConflictStrategy = Literal["last_wins", "first_wins", "error"]


@dataclass
class FanOut:
    source: str
    join: str | None
    branches: dict[str, BranchStatus] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    writes: dict[str, str] = field(default_factory=dict)  # memory key -> first writing branch
    # For last_wins / first_wins, which go by the order branches finish: the branch whose
    # value memory holds, each branch's last (value, node) per key, and (first_wins) the
    # branch that finished first among those that wrote a key.
    last_writer: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict[str, tuple[Any, str | None]]] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)
    node_branch: dict[str, str] = field(default_factory=dict)  # (resume) node -> its branch


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
    """The executor's fan-out continuing ``fan``, the open fan-out of a resumed run's state.

    With ``first_wins`` each key goes to the first branch to reach the join among those
    that wrote it, as it did while the run went on.
    """
    live = FanOut(source=fan.source, join=fan.join)
    live.branches = dict(fan.branches)
    live.errors = dict(fan.errors)
    live.writes = dict(fan.first_writer)
    live.last_writer = dict(fan.last_writer)
    live.values = {
        branch: {key: (write.value, write.node_id) for key, write in kept.items()}
        for branch, kept in fan.values.items()
    }
    live.node_branch = dict(fan.node_branch)
    if conflict_strategy == "first_wins":
        for branch in fan.arrived:
            for key in live.values.get(branch, {}):
                live.claims.setdefault(key, branch)
    return live
