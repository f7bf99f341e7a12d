"""A run's audit timeline from its event log: one line per event, then the outcome.

Everything here comes from stored :class:`eventstore.Event` records (read back from the
store), never from the objects the run used in memory. ``magistrate timeline`` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from eventstore import Event, VerifyReport, event_tag

from ._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    BranchesForked,
    BranchesJoined,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    PauseRequested,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    RunUnrunnable,
    StallDetected,
    ToolResult,
    Verdict,
)
from ._state import fold
from ._verdicts import goal_failures

__all__ = ["LEVEL_NAMES", "describe_event", "render_timeline"]

#: How each judge level is named in the timeline (the seed's vocabulary).
LEVEL_NAMES: Final = {
    "bail_out": "tool-call bail-out",
    "structural": "Level 0 structural",
    "quality": "Level 2 quality",
    "custom": "custom judge",
    "override": "ACCEPT override",
    "max_iterations": "max_iterations",
    "stall": "stall detection",
}

_DETAIL_CHARS: Final = 110


def _json(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _clip(text: str, limit: int = _DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_event(event: Event) -> tuple[str, str, str]:
    """``(node, event label, detail)`` for one stored event: what the timeline shows.

    The label is the event's tag (with the turn number for turns and verdicts); verdicts
    read ``RETRY [Level 0 structural]: feedback``; long texts are clipped.
    """
    body = event.body
    node = getattr(body, "node_id", None) or "-"
    label = event_tag(body)
    if isinstance(body, RunStarted):
        keys = ", ".join(body.input) or "none"
        return node, label, f"graph {body.graph.get('id')}, entry {body.entry}, input: {keys}"
    if isinstance(body, NodeStarted):
        return node, label, f"visit {body.visit}, attempt {body.attempt}"
    if isinstance(body, LlmTurn):
        calls = ", ".join(
            # A call whose arguments were no JSON object: the text the model sent.
            f"{c.name}(unreadable: {_json(c.raw_arguments)})"
            if c.raw_arguments is not None
            else f"{c.name}({', '.join(f'{k}={_json(v)}' for k, v in c.arguments.items())})"
            for c in body.tool_calls
        )
        parts = [f'"{body.text}"'] if body.text else []
        if calls:
            parts.append(f"calls {calls}")
        return node, f"{label} #{body.iteration}", _clip(" ".join(parts) or "(empty turn)", 400)
    if isinstance(body, ToolResult):
        flag = " ERROR" if body.is_error else ""
        return node, label, _clip(f"{body.name}{flag} -> {body.content}")
    if isinstance(body, OutputSet):
        return node, label, _clip(f"{body.key} = {_json(body.value)}")
    if isinstance(body, MessageAdded):
        # Judge feedback is the point of the demo: shown whole; context messages clipped.
        limit = 400 if body.kind in ("feedback", "stall_warning") else _DETAIL_CHARS
        return node, f"message:{body.kind}", _clip(body.content, limit)
    if isinstance(body, Verdict) and body.level == "bail_out":
        # Not judged: the seed's rule records it as RETRY at the bail-out level (after a
        # custom judge that failed on it too: a check that did not run, shown).
        failed = f" (judge error: {body.error})" if body.error else ""
        text = f"not judged (RETRY [tool-call bail-out]){failed}"
        return node, f"tool turn #{body.iteration}", text
    if isinstance(body, Verdict):
        level = LEVEL_NAMES.get(body.level, body.level)
        text = f"{body.action.upper()} [{level}]"
        if body.confidence is not None:
            text += f" confidence {body.confidence:.2f}"
        if body.feedback:
            text += f": {body.feedback}"
        if body.error:
            text += f" (judge error: {body.error})"
        return node, f"{label} #{body.iteration}", text
    if isinstance(body, StallDetected):
        return node, label, _clip(f"turn {body.iteration} repeats {body.signature}")
    if isinstance(body, MemoryWritten):
        return node, label, _clip(f"{body.key} = {_json(body.value)}")
    if isinstance(body, NodeCompleted):
        return node, label, ""
    if isinstance(body, NodeFailed):
        retry = ", will retry" if body.will_retry else ""
        return node, label, f"{body.error_type}: {body.error} (attempt {body.attempt}{retry})"
    if isinstance(body, EdgeTaken):
        why = f", {body.reason}" if body.reason else ""
        return node, label, f"{body.source} -> {body.target} ({body.condition}{why})"
    if isinstance(body, RunPaused):
        at = f" before {body.node_id}" if body.node_id else ""
        return node, label, f"paused ({body.reason}){at}"
    if isinstance(body, PauseRequested):
        return node, label, _clip("pause requested" + (f" by {body.by}" if body.by else ""))
    if isinstance(body, InputInjected):
        return node, label, _clip(", ".join(f"{k} = {_json(v)}" for k, v in body.data.items()))
    if isinstance(body, ApprovalGranted):
        given = ", ".join(f"{k} = {_json(v)}" for k, v in body.input.items())
        return node, label, _clip(f"approved by {body.by}" + (f": {given}" if given else ""))
    if isinstance(body, ApprovalRejected):
        why = f": {body.reason}" if body.reason else ""
        return node, label, _clip(f"rejected by {body.by}{why}")
    if isinstance(body, RunResumed):
        return node, label, body.note
    if isinstance(body, RunCancelled):
        at = f" at {body.node_id}" if body.node_id else ""
        return node, label, f"cancelled{at}" + (f": {body.reason}" if body.reason else "")
    if isinstance(body, RunUnrunnable):
        return node, label, _clip(f"worker {body.worker} cannot execute it: {body.reason}")
    if isinstance(body, GraphReplaced):
        graph = body.graph.get("id", "?")
        forced = f", forced past {body.divergences} divergence(s)" if body.forced else ""
        return node, label, f"moved to graph {graph} ({body.graph_hash[:12]}){forced}"
    if isinstance(body, RunForked):
        return (
            node,
            label,
            (f"the events before are a copy of run {body.source_run_id} seqs 1..{body.source_seq}"),
        )
    if isinstance(body, BranchesForked):
        join = f", join at {body.join}" if body.join else ""
        return node, label, f"{body.source} -> {', '.join(body.targets)} ({body.policy}{join})"
    if isinstance(body, BranchesJoined):
        failed = f", failed: {', '.join(body.failed)}" if body.failed else ""
        return node, label, f"completed: {', '.join(body.completed) or 'none'}{failed}"
    if isinstance(body, RunFinished):
        text = f"status {body.status}, quality {body.quality}, retries {body.total_retries}"
        if body.error:
            text += f", error: {body.error}"
        if unscored := goal_failures(body.goal_outcome):
            text += f", goal not scored ({'; '.join(unscored)})"
        return node, label, text
    fields = msgspec.structs.asdict(body)
    fields.pop("node_id", None)
    return node, label, _clip(", ".join(f"{k}={_json(v)}" for k, v in fields.items()))


def render_timeline(events: Sequence[Event], report: VerifyReport | None) -> list[str]:
    """The timeline's lines: a header, one line per event, then status and verification.

    ``report`` is the store's verification of the run (None for an in-memory log).
    """
    rows = [(str(e.seq), *describe_event(e)) for e in events]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(("seq", "node"))]
    label_width = max([len("event"), *(len(r[2]) for r in rows)])
    header = f"{'seq'.rjust(widths[0])}  {'node'.ljust(widths[1])}  {'event'.ljust(label_width)}"
    rule = "-" * min(100, len(header) + 40)
    lines = [header + "  detail", rule]
    for seq, node, label, detail in rows:
        line = f"{seq.rjust(widths[0])}  {node.ljust(widths[1])}  {label.ljust(label_width)}"
        # One line an event: a text's line breaks (a judge's feedback, a reason) as spaces.
        lines.append(f"{line}  {' '.join(detail.split())}".rstrip())
    lines.append(rule)
    state = fold(events)
    every = [e.body for e in events if isinstance(e.body, Verdict)]
    verdicts = [v for v in every if v.level != "bail_out"]
    turns = sum(1 for e in events if isinstance(e.body, LlmTurn))
    summary = ", ".join(f"{n} {a}" for a, n in _count(v.action.upper() for v in verdicts))
    lines.append(
        f"status: {state.status}   quality: {state.quality or '-'}   "
        f"path: {' -> '.join(state.path) or '-'}"
    )
    if state.judge_failures:
        counted = ", ".join(f"{n} {kind}" for kind, n in state.judge_failures.items())
        lines.append(f"judge failures: {sum(state.judge_failures.values())} ({counted})")
    lines.append(
        f"turns: {turns} ({len(every) - len(verdicts)} tool turns)   "
        f"verdicts: {len(verdicts)} ({summary or 'none'})   events: {len(events)}"
    )
    if report is None:
        lines.append("verify: not available (in-memory log)")
    elif report.ok:
        lines.append(f"verify: ok ({report.checked} events, hash chain intact)")
    else:
        lines.append(f"verify: FAILED at seq {report.broken_at}: {report.reason}")
    return lines


def _count(items: Any) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return list(counts.items())
