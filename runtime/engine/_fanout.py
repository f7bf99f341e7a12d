"""Fan-out bookkeeping: the convergence node, and rebuilding an open fan-out from the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore import Event

from ..events._catalogue import (
    BranchesForked,
    BranchesJoined,
    EdgeTaken,
    MemoryWritten,
    NodeFailed,
    NodeStarted,
)
from ..spec._model import GraphSpec

__all__ = ["FanOut", "convergence_node", "restore_fanout"]


@dataclass
class FanOut:
    source: str
    join: str | None
    branches: dict[str, str] = field(default_factory=dict)  # branch -> running|done|failed
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


def restore_fanout(events: Sequence[Event], conflict_strategy: str) -> FanOut | None:
    """Rebuild an open fan-out (forked, not joined) from the log, for a resume."""
    fork_at = None
    for index, event in enumerate(events):
        if isinstance(event.body, BranchesForked):
            fork_at = index
        elif isinstance(event.body, BranchesJoined):
            fork_at = None
    if fork_at is None:
        return None
    fork = events[fork_at].body
    assert isinstance(fork, BranchesForked)
    fan = FanOut(source=fork.source, join=fork.join)
    fan.branches = {t: "done" if t == fork.join else "running" for t in fork.targets}
    fan.node_branch = {t: t for t in fork.targets}
    for event in events[fork_at + 1 :]:
        body = event.body
        if isinstance(body, NodeStarted) and body.branch is not None:
            fan.node_branch[body.node_id] = body.branch
        elif isinstance(body, EdgeTaken):
            branch = fan.node_branch.get(body.source)
            if branch is not None:
                if body.target == fan.join:
                    fan.branches[branch] = "done"
                    for key in fan.values.get(branch, {}):
                        fan.claims.setdefault(key, branch)
                else:
                    fan.node_branch[body.target] = branch
        elif isinstance(body, NodeFailed) and body.branch is not None and not body.will_retry:
            fan.branches[body.branch] = "failed"
            fan.errors[body.branch] = body.error
        elif isinstance(body, MemoryWritten) and body.branch is not None:
            fan.writes.setdefault(body.key, body.branch)
            fan.last_writer[body.key] = body.branch
            fan.values.setdefault(body.branch, {})[body.key] = (body.value, body.node_id)
    return fan
