"""The shape of a graph's fan-outs: where branches meet, and whether a branch fans out
again (which a run cannot do: a graph that would is refused before it runs)."""

from __future__ import annotations

from collections import deque

from .._errors import SpecError
from ._model import GraphSpec

__all__ = ["convergence_node", "nested_fanouts"]


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


def nested_fanouts(graph: GraphSpec) -> list[SpecError]:
    """A problem for each node that surely fans out (two or more success edges to
    different nodes, all of which fire) and that a branch of another such fan-out reaches
    before its join along such edges, every node succeeding: the branch would fail there.
    A branch that gets there only through a failure, a condition or a model's choice, or
    that fans out through conditional edges, fails at run time instead."""
    order = {node.id: i for i, node in enumerate(graph.nodes)}
    sources = {
        node.id: targets for node in graph.nodes if len(targets := _fanned_to(graph, node.id)) > 1
    }
    found: dict[str, str] = {}  # nested source -> the fan-out whose branch reaches it
    for source, targets in sources.items():
        join = convergence_node(graph, targets)
        seen = set(targets)
        queue = deque(targets)
        while queue:
            node = queue.popleft()
            if node == join:
                continue
            if node in sources and node not in found:
                found[node] = source
            for target in _fanned_to(graph, node):
                if target not in seen:
                    seen.add(target)
                    queue.append(target)
    return [
        SpecError(
            f"nodes[{order[node]}]",
            f"node {node!r} fans out inside a branch of node {source!r}'s fan-out (a branch "
            "cannot fan out again: join the branches first)",
        )
        for node, source in sorted(found.items(), key=lambda item: order[item[0]])
    ]


def _fanned_to(graph: GraphSpec, node_id: str) -> list[str]:
    """The distinct targets a success of ``node_id`` surely goes to (its on_success and
    always edges)."""
    targets: list[str] = []
    for _, edge in graph.node_edges(node_id).on_success:
        if edge.target not in targets:
            targets.append(edge.target)
    return targets
