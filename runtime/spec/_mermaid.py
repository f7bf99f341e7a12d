"""A graph as a Mermaid flowchart (``magistrate graph``; any Markdown viewer with Mermaid)."""

from __future__ import annotations

from collections.abc import Mapping

from ._model import GraphSpec

__all__ = ["graph_to_mermaid"]

# Node shapes by kind: a rectangle for code, a stadium for a model, a rhombus for a
# router, a hexagon for a verifier.
_SHAPES = {
    "function": ("[", "]"),
    "llm": ("([", "])"),
    "router": ("{", "}"),
    "verifier": ("{{", "}}"),
}


def _text(value: str) -> str:
    # Mermaid labels are quoted; a quote, angle brackets and # need entity codes.
    return (
        value.replace("#", "#35;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
    )


def graph_to_mermaid(
    graph: GraphSpec,
    *,
    current: str | None = None,
    visits: Mapping[str, int] | None = None,
) -> str:
    """Mermaid ``flowchart TD`` text for ``graph``.

    Node ids are written as ``n0``, ``n1``, ... (in ``graph.nodes`` order) with the real
    id in the label, so any id is safe; the label also gives the node's kind, and a
    ``visits`` count when given. Edges are labelled with their condition (the expression
    for conditional edges). The entry node gets an arrow from a start marker; terminal
    nodes, pause nodes and ``current`` get the classes ``terminal``, ``pause`` and
    ``current``.
    """
    ids = {node.id: f"n{index}" for index, node in enumerate(graph.nodes)}
    lines = ["flowchart TD"]
    for node in graph.nodes:
        left, right = _SHAPES.get(node.kind, ("[", "]"))
        label = f"{_text(node.id)}<br/><small>{node.kind}</small>"
        if visits and visits.get(node.id):
            label += f"<br/><small>visits: {visits[node.id]}</small>"
        lines.append(f'    {ids[node.id]}{left}"{label}"{right}')
    if graph.entry_node in ids:
        lines.append("    start((start)) --> " + ids[graph.entry_node])
    for edge in graph.edges:
        source, target = ids.get(edge.source), ids.get(edge.target)
        if source is None or target is None:
            continue  # validation reports it; the drawing leaves it out
        if edge.condition == "conditional" and edge.expression:
            label = edge.expression
        else:
            label = edge.condition
        if edge.priority:
            label += f" (priority {edge.priority})"
        arrow = "-.->" if edge.condition in ("on_failure", "llm_decide") else "-->"
        lines.append(f'    {source} {arrow}|"{_text(label)}"| {target}')
    classes = [
        ("terminal", graph.terminal_nodes, "stroke-width:3px"),
        ("pause", graph.pause_nodes, "stroke-dasharray:5 5"),
        ("current", [current] if current else [], "fill:#ffe08a"),
    ]
    for name, members, style in classes:
        chosen = [ids[m] for m in members if m in ids]
        if chosen:
            lines.append(f"    classDef {name} {style}")
            lines.append(f"    class {','.join(chosen)} {name}")
    return "\n".join(lines) + "\n"
