"""Validation of a GraphSpec beyond its types: everything a run would trip on later.

``validate_graph`` reports every problem at once (a :class:`SpecErrors`), each naming
the field by its path (``edges[2].target``), in field order.
"""

from __future__ import annotations

from collections import deque

from .._errors import ExpressionError, SpecError, SpecErrors
from ._branches import nested_fanouts
from ._compiled import adopt_compiled, remember_compiled
from ._expr import compile_expression
from ._flow import (
    NodeIds,
    conflicting_edges,
    dead_end_routers,
    ignored_fields,
    loops_without_exit,
)
from ._goal import check_goal_items
from ._model import GraphSpec, NodeSpec, RetryPolicy
from ._parallel import check_parallel
from ._read_names import check_read_names
from ._types import check_types
from ._verifier import check_verifier

__all__ = ["validate_graph"]


def validate_graph(graph: GraphSpec, *, lint: bool = True) -> None:
    """Check ``graph``; return None if it is sound, else raise :class:`SpecErrors`.

    Checked: node ids (empty, duplicate), node settings (function nodes need a
    ``function``; ``max_iterations`` and ``judge_every_n_turns`` >= 1; nullable keys
    are output keys; retry policies; verifier configuration and expression), nodes
    unreachable from the entry node, edge endpoints, edge conditions (a conditional
    edge needs a valid expression, no other edge may have one; ``llm_decide`` needs a
    ``fallback`` naming a node, no other edge may have one), the entry, terminal and
    pause nodes, every number within its range (:data:`RANGES`), memory keys declared
    twice, the graph retry policy, a branch of a fan-out that surely fans out again,
    ``success_criteria`` on a node that is not an LLM node (nothing would judge it), and
    names that an edge's, an expression verifier's or a goal item's expression reads and
    the graph cannot have (``_read_names``).

    ``lint=False`` leaves out the checks of what a graph surely does that nobody meant
    (fields its nodes' kinds ignore, a loop no run can leave, contradicting edges, a
    router that ends a run failed: ``_flow.py``), for a graph a run already recorded: a
    run started before such a check came in still resumes, forks and cancels as it
    did. (An expression that fails whatever memory holds is refused by either.)

    A spec is frozen, so a graph found sound is remembered as such: starting many runs
    of one GraphSpec validates it once (with ``lint``).
    """
    if not isinstance(graph, GraphSpec):
        raise TypeError(
            f"a graph is a GraphSpec (load_graph reads one from a file or a dict), got "
            f"{type(graph).__name__}"
        )
    index = graph._index()
    if index.valid:
        return
    if adopt_compiled(graph):
        return
    errors: list[SpecError] = check_types(graph)
    if errors:  # a later check would trip over the wrong type
        raise SpecErrors(errors)
    known = {node.id for node in graph.nodes}
    ids = NodeIds(list(dict.fromkeys(node.id for node in graph.nodes)))

    if not graph.id:
        errors.append(SpecError("id", "must not be empty"))

    seen: set[str] = set()
    for i, node in enumerate(graph.nodes):
        if not node.id:
            errors.append(SpecError(f"nodes[{i}].id", "must not be empty"))
        elif node.id in seen:
            errors.append(SpecError(f"nodes[{i}].id", f"duplicate node id {node.id!r}"))
        seen.add(node.id)
        errors.extend(_check_node(f"nodes[{i}]", node, lint))
    if not graph.nodes:
        errors.append(SpecError("nodes", "a graph needs at least one node"))

    # A misspelt id in an edge is one mistake: reachability follows the node meant, so
    # the nodes after it are not reported unreachable as well.
    edge_errors, meant = _check_edges(graph, known, ids, lint)
    if graph.entry_node in known:
        reachable = _reachable(graph, meant)
        reported: set[str] = set()
        for i, node in enumerate(graph.nodes):
            if node.id and node.id not in reachable and node.id not in reported:
                reported.add(node.id)
                errors.append(
                    SpecError(
                        f"nodes[{i}].id",
                        f"node {node.id!r} is unreachable from entry node {graph.entry_node!r}",
                    )
                )

    if lint:
        errors.extend(dead_end_routers(graph))
        errors.extend(loops_without_exit(graph))
    errors.extend(edge_errors)

    if not graph.entry_node:
        errors.append(SpecError("entry_node", "must name the node the run starts at"))
    elif graph.entry_node not in known:
        errors.append(SpecError("entry_node", ids.unknown(graph.entry_node)[0]))
    for field, listed in (
        ("terminal_nodes", graph.terminal_nodes),
        ("pause_nodes", graph.pause_nodes),
    ):
        for j, node_id in enumerate(listed):
            if node_id not in known:
                errors.append(SpecError(f"{field}[{j}]", ids.unknown(node_id)[0]))

    errors.extend(_check_ranges("", graph))
    for i, edge in enumerate(graph.edges):
        errors.extend(_check_ranges(f"edges[{i}].", edge))

    declared: set[str] = set()
    for j, key in enumerate(graph.memory):
        if not key.name:
            errors.append(SpecError(f"memory[{j}].name", "must not be empty"))
        elif key.name in declared:
            errors.append(SpecError(f"memory[{j}].name", f"memory key {key.name!r} declared twice"))
        declared.add(key.name)

    errors.extend(_check_retry("retry", graph.retry))
    if graph.goal is not None:
        goal = graph.goal
        errors.extend(check_goal_items(goal.success_criteria, goal.constraints, lint=lint))
    errors.extend(check_read_names(graph))
    if not errors:  # (its walk needs every edge's nodes to exist)
        errors.extend(nested_fanouts(graph))

    if errors:
        raise SpecErrors(errors)
    if lint:  # sound as a new graph: remembered for equal specs to come
        index.valid = True
        remember_compiled(graph)


def _check_edges(
    graph: GraphSpec, known: set[str], ids: NodeIds, lint: bool
) -> tuple[list[SpecError], dict[str, str]]:
    """The problems of each edge, and the id each misspelt reference was meant as."""
    errors: list[SpecError] = []
    meant: dict[str, str] = {}
    for i, edge in enumerate(graph.edges):
        where = f"edges[{i}]"
        for field, node_id in (("source", edge.source), ("target", edge.target)):
            if node_id not in known:
                reason, close = ids.unknown(node_id)
                errors.append(SpecError(f"{where}.{field}", reason))
                if close is not None:
                    meant[node_id] = close
        if edge.condition == "conditional":
            if edge.expression is None or not edge.expression.strip():
                errors.append(
                    SpecError(f"{where}.expression", "a conditional edge needs an expression")
                )
            else:
                errors.extend(_check_expression(f"{where}.expression", edge.expression, lint))
        elif edge.expression is not None:
            errors.append(
                SpecError(
                    f"{where}.expression",
                    f"only conditional edges take an expression (condition is {edge.condition!r})",
                )
            )
        if edge.condition == "llm_decide":
            if edge.fallback is None:
                errors.append(
                    SpecError(f"{where}.fallback", "an llm_decide edge needs a fallback node")
                )
            elif edge.fallback not in known:
                reason, close = ids.unknown(edge.fallback, "fallback node")
                errors.append(SpecError(f"{where}.fallback", reason))
                if close is not None:
                    meant[edge.fallback] = close
        elif edge.fallback is not None:
            errors.append(SpecError(f"{where}.fallback", "only llm_decide edges take a fallback"))
    if lint:
        errors.extend(conflicting_edges(graph))
    return errors, meant


def _reachable(graph: GraphSpec, meant: dict[str, str]) -> set[str]:
    """Node ids reachable from the entry along edges (and llm_decide fallbacks), an
    unknown id of an edge read as the one ``meant``."""
    successors: dict[str, set[str]] = {}
    for edge in graph.edges:
        targets = successors.setdefault(meant.get(edge.source, edge.source), set())
        targets.add(meant.get(edge.target, edge.target))
        if edge.fallback is not None:
            targets.add(meant.get(edge.fallback, edge.fallback))
    reached = {graph.entry_node}
    queue = deque([graph.entry_node])
    while queue:
        for target in successors.get(queue.popleft(), ()):
            if target not in reached:
                reached.add(target)
                queue.append(target)
    return reached


def _check_expression(path: str, source: str, lint: bool) -> list[SpecError]:
    try:
        compile_expression(source, kinds=lint)
    except ExpressionError as exc:
        where = f" (column {exc.position})" if exc.position is not None else ""
        return [SpecError(path, f"invalid expression {source!r}{where}: {exc.reason}")]
    return []


def _check_node(where: str, node: NodeSpec, lint: bool) -> list[SpecError]:
    errors: list[SpecError] = []
    if node.kind == "function" and not node.function:
        errors.append(
            SpecError(
                f"{where}.function",
                "a function node needs 'function' (an import path 'module:name' or a "
                "registered name)",
            )
        )
    errors.extend(_check_ranges(f"{where}.", node))
    if lint:
        errors.extend(ignored_fields(where, node))
    outputs = set(node.output_keys)
    for j, key in enumerate(node.nullable_keys):
        if key not in outputs:
            errors.append(
                SpecError(f"{where}.nullable_keys[{j}]", f"{key!r} is not one of output_keys")
            )
    if node.retry is not None:
        errors.extend(_check_retry(f"{where}.retry", node.retry))
    if node.success_criteria and node.kind != "llm":
        errors.append(
            SpecError(
                f"{where}.success_criteria",
                f"only llm nodes are judged against success_criteria (kind is {node.kind!r}); "
                "check another node's result with a verifier node",
            )
        )
    if node.kind == "verifier" and node.verifier is None:
        errors.append(SpecError(f"{where}.verifier", "a verifier node needs 'verifier'"))
    if node.verifier is not None:
        if node.kind != "verifier":
            errors.append(
                SpecError(
                    f"{where}.verifier", f"only verifier nodes take one (kind is {node.kind!r})"
                )
            )
        errors.extend(check_verifier(where, node.id, node.output_keys, node.verifier, lint=lint))
    if node.parallel is not None:
        errors.extend(check_parallel(where, node.kind, node.parallel))
    return errors


#: The range of every number a spec holds, inclusive, per struct type and field name
#: (docs/GRAPH_FORMAT.md lists them): finite, so no delay, bound or timeout is endless.
RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "GraphSpec": {"max_steps": (1, 1_000_000)},
    "NodeSpec": {
        "max_iterations": (1, 10_000),
        "judge_every_n_turns": (1, 10_000),
        "stall_threshold": (1, 1_000),
        "timeout": (0.001, 86_400),
        "tool_timeout": (0.001, 86_400),
    },
    "EdgeSpec": {"priority": (-1_000_000, 1_000_000)},
    "RetryPolicy": {
        "max_attempts": (1, 100),
        "initial_delay": (0, 3_600),
        "max_delay": (0, 3_600),
        "multiplier": (1, 10),
        "jitter": (0, 60),
    },
}


def _check_ranges(prefix: str, spec: object) -> list[SpecError]:
    errors: list[SpecError] = []
    for field, (low, high) in RANGES.get(type(spec).__name__, {}).items():
        value = getattr(spec, field)
        if value is None:
            continue  # an optional field left to its default
        if not low <= value <= high:  # also refuses NaN
            errors.append(
                SpecError(f"{prefix}{field}", f"must be between {low} and {high}, got {value}")
            )
    return errors


def _check_retry(where: str, policy: RetryPolicy) -> list[SpecError]:
    return _check_ranges(f"{where}.", policy)
