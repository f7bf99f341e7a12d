"""One run for an auditor: ``show`` (the one-screen summary) and ``timeline`` (an event a
line, or one event whole with ``--seq``).

They only read, and check the hash chain of the whole log: a broken chain is shown, and
is exit 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from .. import RunNotFoundError
from ..events import describe_event, fold, render_timeline
from ..reads import EventRecord, RunReader
from ._commands import add_command
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_output_option,
    add_store_option,
    bounded_int,
    counted,
    emit_json,
    open_store,
    text_arg,
    to_builtins,
)
from ._read import _chain_broken, _owner_words, _when

__all__ = ["register"]

#: The characters of a decision's input ``show`` prints (``timeline --seq`` gives it whole).
_INPUT_SHOWN = 200


def register(sub: Any) -> None:
    p = add_command(sub, "show")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_show)

    p = add_command(sub, "timeline")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    p.add_argument(
        "--seq",
        type=bounded_int(1),
        metavar="SEQ",
        help="only event SEQ, whole: each field on its line, texts as written (json: as "
        "export gives it)",
    )
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_timeline)


async def _show(args: argparse.Namespace) -> int:
    async with open_store(args, heads="read") as store:
        report = await RunReader(store).report(args.run_id)
    data: dict[str, Any] = to_builtins(report)
    if args.output == "json":
        emit_json(data)
        return EXIT_OK if report.chain.ok else EXIT_FAILED
    paused = data["paused"]
    lines = [
        f"run:       {data['run_id']}",
        f"graph:     {data['graph']}",
        f"hash:      {data['graph_hash']}",
        f"status:    {data['status']}"
        + (f", quality {data['quality']}" if data["quality"] else ""),
        f"owner:     {_owner_words(report.ownership, data['owner'], report.draining)}",
        f"created:   {_when(data['created'])} UTC, last event {_when(data['updated'])} UTC",
        f"events:    {data['events']}",
        f"path:      {' -> '.join(data['path']) or '-'}",
    ]
    if data["pending"]:
        lines.append(f"next:      {', '.join(data['pending'])}")
    if paused:
        waiting = ", ".join(paused["waiting_for"])
        lines.append(
            f"paused:    {paused['reason']} before {paused['node_id'] or '-'}"
            + (f", waiting for {waiting}" if waiting else "")
        )
    if report.draining:
        since = (
            "" if report.draining_since is None else f" since {_when(report.draining_since)} UTC"
        )
        lines.append(
            f"draining:  {report.draining}{since} (an abandoned attempt still runs in its "
            "owner, which keeps the claim until it ends)"
        )
    if data["error"]:
        lines.append(f"error:     {data['error']}")
    for failure in data["node_failures"]:
        lines.append(
            f"failed:    {failure['node_id']} (seq {failure['seq']}): "
            f"{failure['error_type']}: {failure['error']}"
        )
    lines.extend(_decisions(data["decisions"], args.run_id))
    verdicts = ", ".join(f"{n} {a.upper()}" for a, n in sorted(data["verdicts"].items()))
    lines.append(
        f"turns:     {data['turns']}, verdicts: {verdicts or 'none'}, "
        f"node retries: {data['total_retries']}"
    )
    tokens = data["tokens"]
    # Every paid model call's (turns, branches, judges, routes, evaluators), by purpose.
    parts = ", ".join(
        f"{purpose} {t['input']} + {t['output']}"
        for purpose, t in data["tokens_by_purpose"].items()
    )
    lines.append(
        f"tokens:    {tokens['input']} input + {counted(tokens['output'], 'output token')}"
        + (f" ({parts})" if parts else "")
    )
    if data["tokens_by_node"]:
        nodes = ", ".join(
            f"{node} {t['input']} + {t['output']}" for node, t in data["tokens_by_node"].items()
        )
        lines.append(f"by node:   {nodes}")
    failures = data["judge_failures"]
    if failures:
        kinds = ", ".join(f"{n} {kind}" for kind, n in failures["by_kind"].items())
        lines.append(f"judge failures: {failures['total']} ({kinds}), checks not run or passed:")
        for item in failures["reasons"]:
            at = f" at {item['node_id']}" if item["node_id"] else ""
            lines.append(f"           seq {item['seq']}, {item['kind']}{at}: {item['reason']}")
    lines.extend(_scorecard(data["goal_outcome"]))
    for reason in data["unrunnable"] if data["status"] == "running" else []:
        lines.append(f"blocked:   a worker cannot execute it: {reason}")
    if data["forked_from"]:
        src = data["forked_from"]
        lines.append(f"forked:    from run {src['run_id']} at seq {src['seq']}")
        # timeline counts every event of the log; show the fork's own (see RunReport).
        lines.append(
            f"           events 1..{src['seq']} are copies; turns, verdicts and tokens are its own"
        )
    chain = report.chain
    lines.append(
        f"chain:     verified: {counted(chain.to_seq, 'event')} intact"
        if chain.ok
        else f"chain:     BROKEN at seq {chain.broken_at}: {chain.reason}"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK if chain.ok else _chain_broken(args.run_id, chain)


def _decisions(decisions: list[dict[str, Any]], run_id: str) -> list[str]:
    """A line per approval or rejection: the gate, who, when, and the input or reason."""
    lines = []
    for item in decisions:
        head = (
            f"{item['decision'] + ':':<11}{item['node_id']} by {item['by']}, "
            f"{_when(item['ts'])} UTC (seq {item['seq']})"
        )
        if item["decision"] == "rejected":
            lines.append(head + (f": {item['reason']}" if item["reason"] else ""))
        elif item["input"]:
            given = msgspec.json.encode(item["input"]).decode()
            if len(given) > _INPUT_SHOWN:
                given = (
                    f"{given[:_INPUT_SHOWN]}... (whole: magistrate timeline {run_id} --seq "
                    f"{item['seq']})"
                )
            lines.append(f"{head}, input {given}")
        else:
            lines.append(head)
    return lines


def _scorecard(outcome: dict[str, Any] | None) -> list[str]:
    """The goal's scorecard (``run.finished``'s), a line a criterion or constraint."""
    if outcome is None:
        return []
    met = {True: "met", False: "NOT met", None: "not scored"}[outcome["met"]]
    score = "" if outcome["score"] is None else f", score {outcome['score']:.2f}"
    lines = [f"goal:      {met}{score}"]
    for item in outcome["criteria"]:
        scored = "-" if item["score"] is None else f"{item['score']:.2f}"
        why = item["error"] or item["reasoning"]
        lines.append(
            f"           {item['id']}: {scored} ({item['method']}"
            f"{', met' if item['met'] else ', not met' if item['met'] is False else ''})"
            + (f": {why}" if why else "")
        )
    for item in outcome["constraints"]:
        held = {True: "held", False: "BROKEN", None: "unchecked"}[item["held"]]
        lines.append(
            f"           {item['id']}: {held}"
            + (f": {item['reasoning']}" if item["reasoning"] else "")
        )
    return lines


async def _timeline(args: argparse.Namespace) -> int:
    async with open_store(args, heads="read") as store:
        reader = RunReader(store)
        events = [event async for event, _ in reader.records(args.run_id)]
        if not events:
            raise RunNotFoundError(args.run_id)
        report = await reader.verify(args.run_id)
    if args.seq is not None:
        event = next((e for e in events if e.seq == args.seq), None)
        if event is None and not report.ok:  # a log cut or with a gap: say where it broke
            sys.stderr.write(f"magistrate: run {args.run_id}: no event {args.seq} can be read\n")
            return _chain_broken(args.run_id, report)
        if event is None:
            raise UsageError(f"--seq {args.seq}: the run's last event is seq {events[-1].seq}")
        record = EventRecord.of(event)
        if args.output == "json":
            emit_json(record)  # as export gives it
        else:
            sys.stdout.write(_whole(record))
    elif args.output == "json":
        rows = []
        for event in events:
            node, label, detail = describe_event(event)
            record = EventRecord.of(event)
            rows.append(
                {
                    "seq": event.seq,
                    "ts": event.ts,
                    "node": None if node == "-" else node,
                    "type": record.type,
                    "label": label,
                    "detail": detail,
                }
            )
        state = fold(events)
        emit_json(
            {
                "run_id": args.run_id,
                "status": state.status,
                "quality": state.quality,
                "events": rows,
                "verify": report,
            }
        )
    else:
        sys.stdout.write("\n".join(render_timeline(events, report)) + "\n")
    return EXIT_OK if report.ok else _chain_broken(args.run_id, report)


def _whole(record: EventRecord) -> str:
    """One event for people: a header (seq, type, node, time), then each field of its
    body on its line, a text with line breaks as an indented block, as written."""
    body = dict(record.body)
    node = body.pop("node_id", None)
    at = f"  node {node}" if isinstance(node, str) else ""
    lines = [f"seq {record.seq}  {record.type}{at}  {_when(record.ts)} UTC"]
    for key, value in body.items():
        if isinstance(value, str) and "\n" in value:
            lines.append(f"  {key}: |")
            lines.extend(f"    {line}" if line else "" for line in value.split("\n"))
        else:
            lines.append(f"  {key}: {msgspec.json.encode(value).decode()}")
    lines.append(f"chain hash {record.hash}")
    return "\n".join(lines) + "\n"
