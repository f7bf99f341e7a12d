"""The names an expression reads must be names the graph can have: a typo is refused
when the graph is validated, not found at run time (or, at a run's end, read as a
criterion not met).

Checked for every expression of a graph:

- a conditional edge's: memory keys;
- an ``expression`` verifier's: ``memory``, ``goal`` and the memory keys its node reads
  (its ``input_keys``; every memory key when it declares none);
- a goal criterion's or constraint's: ``memory``, ``goal``, ``run`` and memory keys.

A memory key is known when some node writes it (its ``output_keys``; a verifier's result
keys), some node reads it (``input_keys``: a run's input can seed it) or the graph's
``memory`` declares it. A function node that declares no ``output_keys`` may write any
key, so in such a graph only a verifier with ``input_keys`` is checked (its names are
then exactly those keys); names read at run time are checked again then.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Set

from .._errors import ExpressionError, SpecError
from ._expr import compile_expression
from ._flow import lookups
from ._model import GraphSpec, NodeSpec
from ._verifier import ExpressionVerifier

__all__ = ["check_read_names"]

_VERIFIER_NAMES = frozenset({"memory", "goal"})
_GOAL_NAMES = frozenset({"memory", "goal", "run"})
_NOWHERE = "which no node writes (output_keys) and no input_keys or memory key declares"


def check_read_names(graph: GraphSpec) -> list[SpecError]:
    """Each expression of ``graph`` that reads a name the graph cannot have, naming it."""
    known = _known_keys(graph)
    errors: list[SpecError] = []
    unknown = _Unknown()
    if known is not None:
        for i, edge in enumerate(graph.edges):
            if edge.condition == "conditional" and edge.expression:
                errors.extend(unknown(f"edges[{i}].expression", edge.expression, known, _NOWHERE))
    for i, node in enumerate(graph.nodes):
        if not isinstance(node.verifier, ExpressionVerifier) or not node.verifier.expression:
            continue
        where = f"nodes[{i}].verifier.expression"
        if node.input_keys:
            allowed = _VERIFIER_NAMES | set(node.input_keys)
            why = "which is not one of the node's input_keys (nor memory or goal)"
        elif known is not None:
            allowed, why = _VERIFIER_NAMES | known, _NOWHERE
        else:
            continue
        errors.extend(unknown(where, node.verifier.expression, allowed, why))
    if graph.goal is not None and known is not None:
        goal = graph.goal
        items: Iterable[tuple[str, object]] = [
            *((f"goal.success_criteria[{i}]", c) for i, c in enumerate(goal.success_criteria)),
            *((f"goal.constraints[{i}]", c) for i, c in enumerate(goal.constraints)),
        ]
        for where, item in items:
            source = getattr(item, "expression", None)  # a plain string item has none
            if isinstance(source, str):
                errors.extend(unknown(f"{where}.expression", source, _GOAL_NAMES | known, _NOWHERE))
    return errors


class _Unknown:
    """The problem of an expression reading names it cannot have, naming the known names
    closest to them for the first few (each lookup costs in proportion to the names known:
    ``_flow.lookups``)."""

    def __init__(self) -> None:
        self.left: int | None = None  # set from the first names known

    def __call__(self, where: str, source: str, allowed: Set[str], why: str) -> list[SpecError]:
        try:
            names = compile_expression(source, kinds=False).names
        except ExpressionError:
            return []  # reported where the expression is checked
        unknown = sorted(names - allowed)
        if not unknown:
            return []
        listed = ", ".join(repr(name) for name in unknown)
        hints: list[str] = []
        if self.left is None:
            self.left = lookups(len(allowed))
        for name in unknown[: max(self.left, 0)]:
            self.left -= 1
            close = difflib.get_close_matches(name, sorted(allowed), n=1)
            hints += (
                [f"{close[0]!r}" + (f" for {name!r}" if len(unknown) > 1 else "")] if close else []
            )
        hint = f"; did you mean {', '.join(hints)}?" if hints else ""
        return [SpecError(where, f"reads {listed}, {why}{hint}")]


def _known_keys(graph: GraphSpec) -> set[str] | None:
    """Every memory key the graph can have, or None when a node may write any key."""
    known = {key.name for key in graph.memory}
    for node in graph.nodes:
        written = _writes(node)
        if written is None:
            return None
        known |= written
        known.update(node.input_keys)
    return known


def _writes(node: NodeSpec) -> set[str] | None:
    """The memory keys ``node`` may write, or None when it may write any key (a callable
    that declares no ``output_keys``)."""
    keys = set(node.output_keys)
    if node.kind == "verifier":
        result = (node.verifier.result_key if node.verifier else None) or f"{node.id}_verification"
        keys.update((result, f"{result}_passed"))
        return keys
    if node.kind == "llm" or node.output_keys or node.function is None:
        return keys  # an LLM node sets only its output keys; a bare router writes nothing
    return None
