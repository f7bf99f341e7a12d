"""What ``approve`` says when it records a decision and leaves the run to another process:
in short, what this process could not load and the command that would run it here."""

from __future__ import annotations

import argparse
import sys

from .. import GraphSpec, Runtime, SpecError, SpecErrors
from ._common import counted, emit_json
from ._result import continue_command

__all__ = ["left_elsewhere"]


async def left_elsewhere(
    args: argparse.Namespace, rt: Runtime, graph: GraphSpec | None, by: str, allow: list[str]
) -> None:
    """A decision recorded and the run not executed here: say what happened and why, as
    the run's log says (a rejection may have ended it, whether or not it could run here)."""
    status = (await rt.get_state(args.run_id)).status
    why = f"the decision ended the run ({status})"
    problems: list[SpecError] = []
    if status == "running":
        why = "its owner or a worker (magistrate worker) continues it"
        if graph is not None:
            try:
                rt.nodes.check(graph)
            except SpecErrors as exc:
                problems = exc.errors
            except SpecError as exc:
                problems = [exc]
        if problems:
            why = f"not executed here; {why}"
    detail = _unloadable(args, graph, problems, allow) if problems and graph else ""
    if args.output == "json":
        emit_json(
            {
                "run_id": args.run_id,
                "decided_by": by,
                "executed": False,
                "status": status,
                "why": why + (f" ({detail})" if detail else ""),
                "problems": [str(p) for p in problems],
            }
        )
        return
    sys.stdout.write(f"run {args.run_id}: decision by {by} recorded; {why}\n")
    if detail:
        sys.stdout.write(f"  {detail}\n")
    if problems and args.debug:
        sys.stderr.write("".join(f"  - {p}\n" for p in problems))


def _references(graph: GraphSpec) -> dict[str, str]:
    """Each import path the graph names, by the spec path its problems name it by."""
    named: dict[str, str] = {}
    for i, node in enumerate(graph.nodes):
        if node.function:
            named[f"nodes[{i}].function"] = node.function
        if node.judge:
            named[f"nodes[{i}].judge"] = node.judge
        for j, tool in enumerate(node.tools):
            named[f"nodes[{i}].tools[{j}]"] = tool
    return named


def _allowed(module: str, allow: list[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allow)


def _unloadable(
    args: argparse.Namespace, graph: GraphSpec, problems: list[SpecError], allow: list[str]
) -> str:
    """One line: what the graph needs that this process may not import, the command that
    runs it here, and how many other problems there are (--debug lists them all)."""
    named = _references(graph)
    refused = [named[p.path] for p in problems if p.path in named]
    refused = [r for r in refused if not _allowed(r.partition(":")[0], allow)]
    modules = sorted({r.partition(":")[0] for r in refused})
    others = len(problems) - len(refused)
    parts = []
    if modules:
        which = ", ".join(repr(m) for m in modules)
        allowed = ", ".join(repr(p) for p in allow) or "none"
        parts.append(
            f"it needs {', '.join(dict.fromkeys(refused))}, and importing from "
            f"module{'s' if len(modules) > 1 else ''} {which} is not allowed here "
            f"(allowed: {allowed}); to run it here: "
            + continue_command(args, "resume", args.run_id, [*allow, *modules])
        )
    if others:
        first = next(p for p in problems if named.get(p.path) not in refused)
        more = f" and {counted(others - 1, 'other')}" if others > 1 else ""
        parts.append(f"{first}{more}" + ("" if args.debug else " (--debug lists every problem)"))
    return "; ".join(parts)
