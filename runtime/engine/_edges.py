"""Edge resolution: which edges fire after a node finishes."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from typing import Any

import msgspec

from .._errors import ExpressionError, ProviderError
from ..events._catalogue import EdgeTaken
from ..llm._meter import Meter, MeteredProvider
from ..providers._asked import asked_at
from ..providers._base import (
    ChatMessage,
    LlmProvider,
    LlmRequest,
    Usage,
    complete_uncut,
    parse_json_object,
)
from ..spec._expr import compile_expression
from ..spec._model import EdgeSpec, GraphSpec

__all__ = [
    "Route",
    "decide_edge",
    "edge_failure",
    "edge_taken",
    "failure_routes",
    "resolve_edges",
]


class Route(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One edge chosen to fire: its index in ``graph.edges``, target and why.

    ``gc=False``: only strings, ints and a Usage of ints, never in a cycle; one is made
    per step.
    """

    index: int
    target: str
    condition: str
    reason: str = ""
    #: An ``llm_decide`` call that failed or answered no candidate (the fallback fires).
    judge_error: str | None = None
    #: The tokens of the ``llm_decide`` call that chose it (None: no model was asked).
    usage: Usage | None = None


def edge_taken(source: str, route: Route) -> EdgeTaken:
    """The event recording that ``route`` fired out of ``source``."""
    taken = EdgeTaken(
        source=source,
        target=route.target,
        edge_index=route.index,
        condition=route.condition,
        reason=route.reason,
        judge_error=route.judge_error,
    )
    if route.usage is None:  # every edge but an llm_decide choice: nothing more per step
        return taken
    return msgspec.structs.replace(taken, usage=route.usage)


def resolve_edges(
    graph: GraphSpec,
    node_id: str,
    *,
    success: bool,
    memory: Mapping[str, Any],
    outputs: Mapping[str, Any],
) -> list[Route] | None:
    """Return the edges that fire, in order (several mean a fan-out), or None when the
    choice falls to the node's llm_decide edges (then :func:`decide_edge` asks a model).

    On success: the first conditional edge (priority, then declaration order) whose
    expression is truthy wins alone; otherwise the llm_decide edges, if any, make one
    choice among their targets; otherwise every ``on_success`` and ``always`` edge fires.
    On failure: every ``on_failure`` and ``always`` edge fires. Expressions read the
    node's ``outputs`` over ``memory``.
    An expression that fails to evaluate (a name nothing wrote, a type mismatch, ...)
    raises :class:`ExpressionError`: the executor fails the run at the node with it
    (:func:`edge_failure`) and no edge fires, never reading it as false.

    Synchronous, as it runs at every step: edges come pre-sorted from the graph's index,
    and the names an expression reads (a view, not a copy) are built only when a
    conditional edge is evaluated.
    """
    if not success:
        return failure_routes(graph, node_id)
    edges = graph.node_edges(node_id)
    if edges.conditional:
        # ChainMap wants mutable maps; it is only read here.
        names: Mapping[str, Any] = ChainMap(outputs, memory)  # type: ignore[arg-type]
        for index, edge in edges.conditional:
            assert edge.expression is not None  # validated
            if compile_expression(edge.expression, kinds=False).truthy(names):
                return [
                    Route(
                        index=index,
                        target=edge.target,
                        condition="conditional",
                        reason=edge.expression,
                    )
                ]
    if edges.llm_decide:
        return None
    return [Route(index=i, target=e.target, condition=e.condition) for i, e in edges.on_success]


def edge_failure(
    graph: GraphSpec,
    node_id: str,
    error: ExpressionError,
    *,
    memory: Mapping[str, Any],
    outputs: Mapping[str, Any],
) -> str:
    """The error a run fails with when an expression on an edge out of ``node_id``
    raised: the edge, the expression, the values it read and the error."""
    target = next(
        (
            e.target
            for _, e in graph.node_edges(node_id).conditional
            if e.expression == error.expression
        ),
        "?",
    )
    read: list[str] = []
    for name in sorted(compile_expression(error.expression, kinds=False).names):
        if name in outputs:
            read.append(f"{name}={_shown(outputs[name])}")
        elif name in memory:
            read.append(f"{name}={_shown(memory[name])}")
        else:
            read.append(f"{name} (not set)")
    values = ", ".join(read) or "no names"
    return (
        f"the edge {node_id!r} -> {target!r} could not be evaluated: {error}; "
        f"it read {values}. No edge out of {node_id!r} fired"
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def failure_routes(graph: GraphSpec, node_id: str) -> list[Route]:
    """The edges that fire after ``node_id`` failed: every ``on_failure`` and ``always``
    edge, in order. No model is asked: llm_decide edges choose only after a success."""
    edges = graph.node_edges(node_id).on_failure
    return [Route(index=i, target=e.target, condition=e.condition) for i, e in edges]


async def decide_edge(
    graph: GraphSpec, node_id: str, outputs: Mapping[str, Any], provider: LlmProvider | None
) -> Route:
    """The one llm_decide edge of ``node_id`` a model picks (its fallback on any failure)."""
    deciders = list(graph.node_edges(node_id).llm_decide)
    return await _llm_decide(graph, node_id, deciders, outputs, provider)


async def _llm_decide(
    graph: GraphSpec,
    node_id: str,
    deciders: list[tuple[int, EdgeSpec]],
    outputs: Mapping[str, Any],
    provider: LlmProvider | None,
) -> Route:
    first_index, first = deciders[0]
    fallback = next((e.fallback for _, e in deciders if e.fallback), first.target)
    by_target = {e.target: i for i, e in deciders}
    if provider is None:
        return Route(
            index=first_index,
            target=fallback,
            condition="llm_decide",
            reason="fallback: no LLM provider configured",
        )
    goal = graph.goal.description if graph.goal is not None else ""
    candidates = "\n".join(
        f"- {e.target}: {e.description or graph.node(e.target).description}" for _, e in deciders
    )
    prompt = (
        f"Goal: {goal}\n"
        f"Node {node_id!r} just finished with output:\n"
        f"{msgspec.json.encode(dict(outputs)).decode()}\n\n"
        f"Choose the next node among:\n{candidates}\n\n"
        'Answer with JSON only: {"target": "<node id>", "reasoning": "<why>"}'
    )
    request = LlmRequest(
        messages=[ChatMessage(role="user", content=prompt)],
        system="You route an agent graph to the node that best serves the goal.",
        json_response=True,
        purpose="route",
        max_tokens=256,
    )
    # Each call's tokens as it returns: paid whether or not it reads as a choice, and a
    # cut answer's too when asking once more fails (a 5xx, a timeout).
    meter = Meter()
    try:
        with asked_at(node_id):
            # A cut answer is no choice: asked once more, then a TruncatedError (fallback).
            response = await complete_uncut(MeteredProvider(provider, meter), request)
        answer = parse_json_object(response.text)
    except ProviderError as exc:
        return Route(
            index=by_target.get(fallback, first_index),
            target=fallback,
            condition="llm_decide",
            reason=f"fallback: {exc}",
            judge_error=f"{type(exc).__name__}: {exc}",
            usage=meter.usage,
        )
    target = answer.get("target")
    if not isinstance(target, str) or target not in by_target:
        return Route(
            index=by_target.get(fallback, first_index),
            target=fallback,
            condition="llm_decide",
            reason=f"fallback: unknown target {target!r}",
            judge_error=f"the router answered no candidate: {target!r}",
            usage=meter.usage,
        )
    reasoning = answer.get("reasoning", "")
    return Route(
        index=by_target[target],
        target=target,
        condition="llm_decide",
        reason=str(reasoning),
        usage=meter.usage,
    )
