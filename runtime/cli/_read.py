"""Read commands: ``runs``, ``state``, ``export`` and ``graph`` (``show`` and ``timeline``
are in ``_show``).

They only read: nothing here appends to a store. Data goes to stdout (``--output json``
for programs), diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import sys
import time
from typing import Any

import msgspec

from eventstore import RunQuery, VerifyReport

from .. import RunNotFoundError, load_graph
from ..events import RunState
from ..reads import ChainStatus, EventRecord, RunReader, RunSummary, StateView
from ..spec import graph_to_mermaid
from ._commands import add_command
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_output_option,
    add_store_option,
    bounded_int,
    emit_json,
    open_store,
    text_arg,
    to_builtins,
)

__all__ = ["register"]

_STATUSES = ("new", "running", "paused", "cancelled", "completed", "failed")
_QUALITIES = ("clean", "degraded", "failed")
_GRAPH_HASH = re.compile(r"[0-9a-f]{64}")
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _time(text: str) -> float:
    """A time as Unix seconds: seconds, an ISO 8601 date or time (UTC unless it names its
    zone), or a span back from now (``90s``, ``30m``, ``2h``, ``7d``)."""
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return time.time() - float(ago[1]) * _UNITS[ago[2]]
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (Unix seconds, ISO 8601 like 2026-01-31T08:00, or 2h ago "
            "as 2h)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "runs",
        description="List runs, newest first (by creation time), a page at a time. Every "
        "filter given must match. When more runs match than --limit, the next page's "
        "--cursor is printed to stderr.",
    )
    p.add_argument("--status", choices=_STATUSES, help="only runs with this status")
    p.add_argument("--quality", choices=_QUALITIES, help="only finished runs of this quality")
    p.add_argument(
        "--graph", metavar="ID", type=text_arg, help="only runs of this graph id (or graph hash)"
    )
    p.add_argument("--since", type=_time, metavar="TIME", help="only runs created at or after TIME")
    p.add_argument("--until", type=_time, metavar="TIME", help="only runs created before TIME")
    p.add_argument(
        "--limit", type=bounded_int(1), default=50, metavar="N", help="at most N runs (50)"
    )
    p.add_argument("--cursor", metavar="CURSOR", type=text_arg, help="the page after this cursor")
    p.add_argument("-q", "--quiet", action="store_true", help="only the run ids, one per line")
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_runs)

    p = add_command(sub, "state")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    p.add_argument("--at", type=bounded_int(1), metavar="SEQ", help="the state after event SEQ")
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_state)

    p = add_command(sub, "export")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    add_store_option(p)
    p.set_defaults(handler=_export)

    p = add_command(sub, "graph")
    p.add_argument("graph_file", metavar="GRAPH_FILE")
    add_output_option(p)
    p.set_defaults(handler=_graph)


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def _chain_broken(run_id: str, chain: ChainStatus | VerifyReport) -> int:
    """Say on stderr that the run's chain is broken, in verify's words; the exit code."""
    where = f" at seq {chain.broken_at}" if chain.broken_at is not None else ""
    sys.stderr.write(f"magistrate: run {run_id}: hash chain broken{where}: {chain.reason}\n")
    return EXIT_FAILED


#: The owner column of a run no live claim holds (a claimed run shows its owner's id).
_OWNER_WORDS = {
    "waiting": "(waiting for a worker)",
    "unclaimed": "-",
    "unrecorded": "(not recorded)",
}


def _owner_words(ownership: str | None, owner: str | None, draining: str | None = None) -> str:
    """The owner column of ``runs`` and the owner line of ``show``: a claim kept while an
    abandoned attempt runs on says so (``(draining NODE)``)."""
    if ownership is None:
        return "-"  # a run the listing does not hold
    words = _OWNER_WORDS.get(ownership, owner or "")
    return f"{words} (draining {draining})" if draining else words


async def _runs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    graph: str | None = args.graph
    by_hash = graph is not None and _GRAPH_HASH.fullmatch(graph) is not None
    query = RunQuery(
        status=args.status,
        quality=args.quality,
        graph_id=None if by_hash else graph,
        graph_hash=graph if by_hash else None,
        since=args.since,
        until=args.until,
    )
    async with open_store(args, heads="read") as store:
        try:
            page = await RunReader(store).list_runs(query, cursor=args.cursor, limit=args.limit)
        except ValueError as exc:
            raise UsageError(f"--cursor: {exc}") from None
    runs: list[RunSummary] = page.runs
    if args.output == "json":
        # The page as the HTTP API answers it: the next page's cursor is in it.
        emit_json(page)
        return EXIT_OK
    if args.quiet:
        sys.stdout.write("".join(f"{r.run_id}\n" for r in runs))
        return EXIT_OK
    if page.next_cursor is not None:
        sys.stderr.write(f"more runs match: the next page is --cursor {page.next_cursor}\n")
    rows = [
        [
            r.run_id,
            r.graph_id or "",
            r.status,
            r.quality or "",
            _owner_words(r.ownership, r.owner, r.draining),
            str(r.last_seq),
            _when(r.created),
            _when(r.updated),
            r.origin or "-",
        ]
        for r in runs
    ]
    headers = [
        "run",
        "graph",
        "status",
        "quality",
        "owner",
        "events",
        "created (UTC)",
        "updated (UTC)",
        "fork of",
    ]
    sys.stdout.write(_table(rows, headers))
    return EXIT_OK


async def _state_of(args: argparse.Namespace, *, to_seq: int | None) -> tuple[StateView, bool]:
    """The run's state after event ``to_seq`` (None: its last), and whether nothing
    executes its started nodes now: the state is the run's newest, running, and no live
    claim holds the run (``show``'s ``(waiting for a worker)``: its owner died or handed
    it back)."""
    async with open_store(args, heads="read") as store:
        reader = RunReader(store)
        view = await reader.state(args.run_id, at_seq=to_seq)
        state = view.state
        if state.status != "running" or not state.running:
            return view, False
        row = await reader.summary(args.run_id)
    return view, row.ownership == "waiting" and row.last_seq == state.last_seq


#: Why a state's started, unfinished nodes are not running, by the run's status.
_STOPPED_BY = {"cancelled": "the run was cancelled", "paused": "the run paused"}


def _started_line(state: RunState, waiting: bool) -> str | None:
    """The line naming the state's started, unfinished nodes (``running``: what a resume
    runs again): ``running:`` while the run runs; ``interrupted:`` with why when it does
    not (cancelled, paused, or waiting for a worker). The pause's own node is on the
    ``paused:`` line, as ``show`` has it."""
    nodes = list(state.running)
    if state.status == "paused" and state.paused is not None:
        nodes = [node for node in nodes if node != state.paused.node_id]
    if not nodes:
        return None
    if state.status == "running" and not waiting:
        return f"running: {', '.join(nodes)}"
    why = _STOPPED_BY.get(state.status, "waiting for a worker")
    return f"interrupted: {', '.join(nodes)} ({why})"


async def _state(args: argparse.Namespace) -> int:
    try:
        view, waiting = await _state_of(args, to_seq=args.at)
    except ValueError as exc:  # past the run's last event
        raise UsageError(f"--at {args.at}: {exc}") from None
    if not view.chain.ok:
        # A state folded from a broken log is not the run's: name the break, show nothing.
        return _chain_broken(args.run_id, view.chain)
    state = view.state
    if args.output == "json":
        # The state's fields, and the check of the read that folded it (as show's).
        emit_json({**msgspec.to_builtins(state), "chain": msgspec.to_builtins(view.chain)})
        return EXIT_OK
    lines = [
        f"run {state.run_id} at seq {state.last_seq}: {state.status}"
        + (f", quality {state.quality}" if state.quality else ""),
        f"path: {' -> '.join(state.path) or '-'}",
        f"next: {', '.join(state.pending) or '-'}",
    ]
    started = _started_line(state, waiting)
    if started is not None:
        lines.append(started)
    if state.paused:
        lines.append(f"paused: {state.paused.reason} before {state.paused.node_id or '-'}")
    if state.failed_nodes:
        lines.append(f"failed: {', '.join(state.failed_nodes)}")
    if state.error:
        lines.append(f"error: {state.error}")
    lines.append("memory:")
    for key, value in state.memory.items():
        lines.append(f"  {key}: {msgspec.json.encode(to_builtins(value)).decode()}")
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


async def _export(args: argparse.Namespace) -> int:
    encoder = msgspec.json.Encoder()
    out = sys.stdout
    chain: ChainStatus | None = None
    async with open_store(args, heads="unused") as store:
        async for event, status in RunReader(store).records(args.run_id):
            out.write(encoder.encode(EventRecord.of(event)).decode())
            out.write("\n")
            chain = status
    if chain is None:
        raise RunNotFoundError(args.run_id)
    # What the log holds is written either way; a broken chain is said, and is exit 1.
    return EXIT_OK if chain.ok else _chain_broken(args.run_id, chain)


async def _graph(args: argparse.Namespace) -> int:
    graph = load_graph(args.graph_file)
    text = graph_to_mermaid(graph)
    if args.output == "json":
        emit_json({"graph": graph.id, "mermaid": text})
    else:
        sys.stdout.write(text)
    return EXIT_OK
