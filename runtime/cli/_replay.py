"""``magistrate replay``: run recorded runs again against a graph and say what would change.

One run (``replay RUN [--graph FILE]``) prints its report; many runs (``replay --graph
FILE`` with the ``runs`` filters: ``--status``, ``--since``, ``--until``) replay every
run of the file's graph id that matches and print a summary table. Nothing is written
and no model, tool or function is called (``--rerun-functions`` runs function nodes).
Exit 0 when nothing diverged (warnings allowed), 1 when something did, 2 for bad input
or a log that fails verification (with verify's reason).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

from eventstore import CorruptLogError, RunQuery

from .. import LlmProvider, ReplayReport, Runtime, load_graph
from ..reads import RunReader
from ._commands import add_command
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_allow_imports_option,
    add_output_option,
    add_store_option,
    allowed_imports,
    bounded_int,
    emit_json,
    open_store,
    text_arg,
)
from ._import_path import search_working_directory
from ._read import _STATUSES, _time
from ._wiring import make_provider

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "replay",
        description="Run a recorded run again from its start against a graph (default: "
        "the one it ran with), in memory: recorded model answers, tool results and function "
        "outputs are served from the log, everything the runtime decides is decided again, "
        "and each divergence is reported with its seq and reason. With --graph and no RUN, "
        "replays every run of that graph id the filters match.",
    )
    p.add_argument("run_id", metavar="RUN", type=text_arg, nargs="?", help="the run to replay")
    p.add_argument("--graph", metavar="FILE", help="the graph to replay against")
    p.add_argument(
        "--rerun-functions",
        action="store_true",
        help="run function nodes again (pure functions) instead of serving their outputs",
    )
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="ask the Level 2 judges and llm_judge verifiers again, live (costs tokens)",
    )
    p.add_argument(
        "--provider",
        metavar="P",
        help="with --rejudge: the model that judges, openai, anthropic or scripted:FILE "
        "(default: openai or anthropic when its API key is set)",
    )
    p.add_argument("--status", choices=_STATUSES, help="many runs: only runs with this status")
    p.add_argument("--since", type=_time, metavar="TIME", help="many runs: created at or after")
    p.add_argument("--until", type=_time, metavar="TIME", help="many runs: created before")
    p.add_argument(
        "--limit", type=bounded_int(1), default=100, metavar="N", help="many runs: at most N"
    )
    add_allow_imports_option(p, default="none: judges are served from the log")
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_replay)


async def _replay(args: argparse.Namespace) -> int:
    if args.run_id is None and args.graph is None:
        raise UsageError("replay takes a RUN, or --graph FILE to replay many runs")
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    allow = allowed_imports(args) or []
    search_working_directory(allow)
    graph = load_graph(args.graph) if args.graph else None
    async with AsyncExitStack() as stack:
        provider = await _judge_model(args, stack)
        # It only reads the store (the replay runs on an in-memory log), as show does.
        store = await stack.enter_async_context(open_store(args, heads="read"))
        rt = await stack.enter_async_context(Runtime(store, provider=provider))
        if args.run_id is not None:
            report = await _one(rt, args.run_id, graph, args, allow)
            if args.output == "json":
                emit_json(report)
            else:
                sys.stdout.write(report.summary() + "\n")
            return EXIT_OK if report.equal else EXIT_FAILED
        assert graph is not None
        query = RunQuery(status=args.status, graph_id=graph.id, since=args.since, until=args.until)
        page = await RunReader(store).list_runs(query, limit=args.limit)
        reports: list[ReplayReport] = []
        corrupt: dict[str, str] = {}
        for run in page.runs:
            try:
                reports.append(await _one(rt, run.run_id, graph, args, allow))
            except UsageError as exc:
                corrupt[run.run_id] = str(exc)
    _summary(args, reports, corrupt)
    if corrupt:
        return EXIT_USAGE
    return EXIT_OK if all(r.equal for r in reports) else EXIT_FAILED


async def _one(
    rt: Runtime, run_id: str, graph: Any, args: argparse.Namespace, allow: list[str]
) -> ReplayReport:
    try:
        return await rt.replay(
            run_id,
            graph,
            rerun_functions=args.rerun_functions,
            allow_imports=allow,
            rejudge=args.rejudge,
        )
    except CorruptLogError as exc:
        raise UsageError(f"run {run_id} fails verification: {exc.reason}") from None


async def _judge_model(args: argparse.Namespace, stack: AsyncExitStack) -> LlmProvider | None:
    """The model ``--rejudge`` asks (None without it): ``--provider``, else the one whose
    API key is set."""
    if not args.rejudge:
        if args.provider is not None:
            raise UsageError("--provider is for --rejudge: a replay asks no model otherwise")
        return None
    option = args.provider
    if option is None:
        option = next((name for name, key in _KEYS if os.environ.get(key)), None)
    if option is None:
        raise UsageError(
            "--rejudge asks the judges again: give --provider openai|anthropic|scripted:FILE "
            "(or set OPENAI_API_KEY or ANTHROPIC_API_KEY)"
        )
    return await make_provider(option, None, stack)


_KEYS = (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY"))


def _summary(
    args: argparse.Namespace, reports: list[ReplayReport], corrupt: dict[str, str]
) -> None:
    equal = sum(1 for r in reports if r.equal)
    kinds = Counter(d.kind for r in reports for d in r.divergences)
    stopped = sum(1 for r in reports if r.stopped)
    if args.output == "json":
        emit_json(
            {
                "replayed": len(reports),
                "equal": equal,
                "diverged": len(reports) - equal,
                "stopped": stopped,
                "by_kind": dict(kinds),
                "failed_verification": corrupt,
                "reports": reports,
            }
        )
        return
    out = sys.stdout
    out.write(
        f"runs replayed: {len(reports)}, equal: {equal}, diverged: {len(reports) - equal}"
        f" (stopped: {stopped})\n"
    )
    if kinds:
        out.write("by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + "\n")
    for report in reports:
        first = report.first
        if report.equal:
            shown = "equal"
        elif first is not None:
            shown = f"seq {first.seq} [{first.kind}] {first.reason}"
        else:
            shown = f"stopped: {report.stopped}"
        out.write(f"{report.run_id}  {shown}\n")
    for run_id, reason in corrupt.items():
        out.write(f"{run_id}  FAILED verification: {reason}\n")
