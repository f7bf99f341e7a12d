"""Checks of how control flows through a graph, for :func:`validate_graph`: mistakes that
load and validate field by field but make a run do what nobody meant.

- a node id that names no node: the closest id (``did you mean 'billing'?``), or the ids;
- fields the node's kind never reads (``tools`` on a function node, ``function`` on an
  LLM node): ignored at run time, so refused rather than silently dropped;
- a router with no outgoing edges in a graph that declares ``terminal_nodes``: a run that
  reaches it surely ends there, failed;
- edges that contradict each other: a node's ``llm_decide`` edges naming different
  fallbacks (one choice has one), an ``on_success`` edge beside ``llm_decide`` edges
  (which choose after every success: it never fires), one target offered twice;
- a loop no run can leave (no edge out, no terminal or pause node in it, each node
  taking an edge whenever it succeeds) while ``max_steps`` is left at its default: a run
  entering it can only fail at that bound. A ``max_steps`` set to another value says the
  bound is meant.
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Iterable

import msgspec

from .._errors import SpecError
from ._model import EdgeSpec, GraphSpec, NodeSpec

__all__ = [
    "COMPARISONS",
    "SUGGESTIONS",
    "NodeIds",
    "conflicting_edges",
    "dead_end_routers",
    "ignored_fields",
    "lookups",
    "loops_without_exit",
]

#: Fields only ``llm`` nodes read (``max_iterations`` and ``tool_timeout`` too, but graphs
#: have set them on nodes of every kind: those stay accepted, and ignored).
_LLM_ONLY = (
    "system_prompt",
    "tools",
    "judge",
    "model",
    "judge_every_n_turns",
    "stall_threshold",
    "judge_fail_closed",
    "client_facing",
)
_DEFAULTS = {
    f.name: f.default_factory() if f.default is msgspec.NODEFAULT else f.default
    for f in msgspec.structs.fields(NodeSpec)
    if f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
}
_DEFAULT_MAX_STEPS = {f.name: f.default for f in msgspec.structs.fields(GraphSpec)}["max_steps"]


#: Misspelt references one validation looks up a close spelling for, at most, and the
#: names compared in all (about 15 µs each): a file of thousands of wrong ids among
#: thousands of nodes stays quick to check.
SUGGESTIONS = 20
COMPARISONS = 30_000


def lookups(candidates: int) -> int:
    """How many close spellings one validation looks up among ``candidates`` names."""
    return min(SUGGESTIONS, max(1, COMPARISONS // max(candidates, 1)))


class NodeIds:
    """The graph's node ids, telling what an unknown one was probably meant to be."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.left = lookups(len(ids))
        self.meant: dict[str, str | None] = {}

    def unknown(self, node_id: str, what: str = "node") -> tuple[str, str | None]:
        """The reason for a reference to ``node_id``, which names none of the ids, and
        the id it was probably meant to be (None if none is close)."""
        if node_id not in self.meant and self.left > 0:
            self.left -= 1
            close = difflib.get_close_matches(node_id, self.ids, n=1)
            self.meant[node_id] = close[0] if close else None
        meant = self.meant.get(node_id)
        if meant is not None:
            return f"unknown {what} {node_id!r}; did you mean {meant!r}?", meant
        ids = self.ids
        shown = ", ".join(repr(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
        return f"unknown {what} {node_id!r} (the nodes: {shown})", None


def ignored_fields(where: str, node: NodeSpec) -> list[SpecError]:
    """Fields ``node`` sets that its kind never reads."""
    errors: list[SpecError] = []
    if node.kind != "llm":
        for field in _LLM_ONLY:
            if getattr(node, field) != _DEFAULTS[field]:
                errors.append(
                    SpecError(
                        f"{where}.{field}",
                        f"only llm nodes use {field!r} (kind is {node.kind!r}): it would be "
                        "ignored; remove it, or make the node kind: llm",
                    )
                )
    elif node.function is not None:
        errors.append(
            SpecError(
                f"{where}.function",
                "an llm node calls no function (kind is 'llm'): it would be ignored; remove "
                "it, or make the node kind: function",
            )
        )
    if node.kind == "verifier" and node.function is not None:
        errors.append(
            SpecError(
                f"{where}.function",
                "a verifier node calls no function (kind is 'verifier'): it would be ignored; "
                "its check is 'verifier'",
            )
        )
    return errors


def dead_end_routers(graph: GraphSpec) -> list[SpecError]:
    """Routers a run surely ends at, failed: no outgoing edge, and not a terminal node of a
    graph that declares some."""
    if not graph.terminal_nodes:
        return []  # a run completes at a node without edges: an end, if an odd one
    sources = {edge.source for edge in graph.edges}
    terminal = set(graph.terminal_nodes)
    return [
        SpecError(
            f"nodes[{i}].id",
            f"router {node.id!r} has no outgoing edges and is not one of terminal_nodes: it "
            "routes nowhere, and a run reaching it stops there and fails (unless a parallel "
            "branch reached a terminal node); give it edges to route along, or list it in "
            "terminal_nodes",
        )
        for i, node in enumerate(graph.nodes)
        if node.kind == "router" and node.id not in sources and node.id not in terminal
    ]


def conflicting_edges(graph: GraphSpec) -> list[SpecError]:
    """Edges of one node that contradict each other (see the module's doc)."""
    errors: list[SpecError] = []
    by_source: dict[str, list[tuple[int, EdgeSpec]]] = {}
    for i, edge in enumerate(graph.edges):
        by_source.setdefault(edge.source, []).append((i, edge))
    for source, edges in by_source.items():
        deciders = [(i, e) for i, e in edges if e.condition == "llm_decide"]
        first = next(((i, e.fallback) for i, e in deciders if e.fallback is not None), None)
        for i, edge in deciders:
            if first is not None and edge.fallback not in (None, first[1]) and i != first[0]:
                errors.append(
                    SpecError(
                        f"edges[{i}].fallback",
                        f"node {source!r} makes one llm_decide choice with one fallback, and "
                        f"edges[{first[0]}] names {first[1]!r}: name the same fallback on each "
                        "of its llm_decide edges",
                    )
                )
        offered: dict[str, int] = {}  # an llm_decide target -> its first edge
        for j, later in edges:
            if deciders and later.condition == "on_success":
                errors.append(
                    SpecError(
                        f"edges[{j}].condition",
                        f"never fires: after {source!r} succeeds, its llm_decide edges choose "
                        f"the next node; make this edge llm_decide to offer {later.target!r} as "
                        f"a choice, or on_failure to take it when {source!r} fails",
                    )
                )
            if later.condition != "llm_decide" or later.target in offered:
                if later.condition == "llm_decide":
                    errors.append(
                        SpecError(
                            f"edges[{j}]",
                            f"repeats edges[{offered[later.target]}] ({source!r} -> "
                            f"{later.target!r}): the same llm_decide choice twice; remove one",
                        )
                    )
                continue
            offered[later.target] = j
    return errors


def loops_without_exit(graph: GraphSpec) -> list[SpecError]:
    """Loops a run can never leave, when ``max_steps`` is left at its default (see the
    module's doc). Edges to unknown nodes are left out (reported elsewhere)."""
    if graph.max_steps != _DEFAULT_MAX_STEPS:
        return []
    order = {node.id: i for i, node in reversed(list(enumerate(graph.nodes)))}
    successors: dict[str, list[str]] = {node_id: [] for node_id in order}
    for edge in graph.edges:
        if edge.source in order:
            for target in (edge.target, edge.fallback):
                if target is not None and target in order:
                    successors[edge.source].append(target)
    stops = set(graph.terminal_nodes) | set(graph.pause_nodes)
    #: Nodes that take an edge whenever they succeed (no conditional edge left to miss).
    moving = {
        e.source for e in graph.edges if e.condition in ("on_success", "always", "llm_decide")
    }
    found: list[tuple[int, SpecError]] = []
    for component in _components(successors):
        members = set(component)
        first = min(component, key=order.__getitem__)
        if len(component) == 1 and first not in successors[first]:
            continue  # no cycle
        if members & stops or not members <= moving:
            continue
        if any(t not in members for n in component for t in successors[n]):
            continue
        cycle = _cycle(first, successors, members)
        shown = " -> ".join(repr(n) for n in cycle)
        if len(cycle) > 9:  # a long loop: its ends, and how long it is
            head, tail = " -> ".join(map(repr, cycle[:4])), " -> ".join(map(repr, cycle[-3:]))
            shown = f"{head} -> ... ({len(cycle) - 1} nodes) -> {tail}"
        what = f"node {first!r} loops back to itself" if len(cycle) == 2 else f"nodes {shown} loop"
        reason = (
            f"{what} with no way out: no edge leaves it, none of its nodes is one of "
            "terminal_nodes or pause_nodes, and each takes an edge whenever it succeeds, so a "
            f"run entering it can only fail, at max_steps ({graph.max_steps}). Give it a way "
            "out (a conditional edge that can be false, an edge to a node outside it), list one "
            "of its nodes in terminal_nodes, or set max_steps if ending there is meant"
        )
        found.append((order[first], SpecError(f"nodes[{order[first]}].id", reason)))
    return [error for _, error in sorted(found, key=lambda pair: pair[0])]


def _components(successors: dict[str, list[str]]) -> Iterable[list[str]]:
    """Strongly connected components (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    for root in successors:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, next_child = work.pop()
            if next_child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = successors[node]
            if next_child < len(children):
                work.append((node, next_child + 1))
                child = children[next_child]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                yield component
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])


def _cycle(first: str, successors: dict[str, list[str]], members: set[str]) -> list[str]:
    """The shortest cycle from ``first`` back to it inside ``members``."""
    came_from: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for target in successors[node]:
            if target == first:
                path = [node]
                while path[-1] != first:
                    path.append(came_from[path[-1]])
                return [*reversed(path), first]
            if target in members and target not in came_from:
                came_from[target] = node
                queue.append(target)
    return [first, first]
