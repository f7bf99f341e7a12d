"""The judge verdicts and stall warnings a run's state keeps: the last verdict of each
node, counts by action, and each node's newest entries (bounded, so a long run's state and
its snapshots stay small); and the checks that did not run (judge failures).

A **judge failure** is a check that did not run, by kind (:data:`JUDGE_FAILURE_KINDS`):
``judge`` (a verdict with an ``error``: its quality call failed), ``route`` (an
``llm_decide`` fallback after a failed or unusable call: ``edge.taken``'s
``judge_error``), ``branch_judge`` (a round's selection by fallback: ``branches.judged``
with an ``error``, its call failed; ``branches.selected`` with an ``error``, the judge's
reply or a custom strategy named no candidate), ``verify`` (``verifier.result`` with an
``error``: the evaluator's reply had no score) and ``goal`` (a criterion the goal's
evaluator was to score and did not: its ``error`` in the scorecard ``run.finished``
records); and a check that ran and was not passed:
``overruled`` (a node's ``max_iterations`` bound accepting its outputs over the RETRY its
judge ruled on that last turn). A completed run with any is at best "degraded".
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from eventstore import EventBody

from ._catalogue import (
    BranchesJudged,
    BranchesSelected,
    StallDetected,
    Verdict,
    VerificationRecorded,
)

__all__ = [
    "JUDGE_FAILURE_KINDS",
    "KEPT_FAILURES",
    "KEPT_PER_NODE",
    "JudgeFailure",
    "StallEntry",
    "VerdictEntry",
    "VerdictRecord",
    "check_failure",
    "count_verdict",
    "goal_failures",
    "keep",
    "keep_failure",
    "overrules",
    "stall_entry",
    "verdict_entry",
    "verdict_record",
]

#: Verdicts (and stall warnings) of one node a state keeps, the newest; counts stay exact.
KEPT_PER_NODE = 500

#: Kinds of judge failures (RunState.judge_failures' keys, the metric's reasons).
JUDGE_FAILURE_KINDS: Final = ("judge", "route", "branch_judge", "verify", "goal", "overruled")

#: Judge failures a state keeps with their reasons, the newest; the counts stay exact.
KEPT_FAILURES = 100


class VerdictRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The last judge verdict of a node."""

    iteration: int
    action: str
    level: str
    feedback: str = ""


class VerdictEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A judge verdict as the log recorded it, at event ``seq``."""

    seq: int
    iteration: int
    action: str
    level: str
    feedback: str = ""
    confidence: float | None = None
    error: str | None = None


class StallEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A stall warning (the same tool calls turn after turn) at event ``seq``."""

    seq: int
    iteration: int
    signature: str


class JudgeFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A check that did not run (or, ``overruled``, was not passed), at event ``seq``: its
    kind, the node it was to check (None for the goal) and why."""

    seq: int
    kind: str
    node_id: str | None
    reason: str


def verdict_record(body: Verdict) -> VerdictRecord:
    return VerdictRecord(
        iteration=body.iteration, action=body.action, level=body.level, feedback=body.feedback
    )


def verdict_entry(body: Verdict, seq: int) -> VerdictEntry:
    return VerdictEntry(
        seq=seq,
        iteration=body.iteration,
        action=body.action,
        level=body.level,
        feedback=body.feedback,
        confidence=body.confidence,
        error=body.error,
    )


def count_verdict(
    counts: dict[str, dict[str, int]], tool_turns: dict[str, int], body: Verdict
) -> None:
    """Count ``body``: a tool turn (level ``bail_out``: it called tools and was not judged)
    in ``tool_turns``, a judged verdict in ``counts`` by its action."""
    if body.level == "bail_out":
        tool_turns[body.node_id] = tool_turns.get(body.node_id, 0) + 1
        return
    by_action = counts.setdefault(body.node_id, {})
    by_action[body.action] = by_action.get(body.action, 0) + 1


def stall_entry(body: StallDetected, seq: int) -> StallEntry:
    return StallEntry(seq=seq, iteration=body.iteration, signature=body.signature)


def keep(kept: dict[str, list[Any]], node_id: str, entry: Any) -> None:
    """Add ``entry`` to ``node_id``'s newest entries, dropping the oldest past KEPT_PER_NODE."""
    entries = kept.get(node_id)
    if entries is None:
        entries = kept[node_id] = []
    entries.append(entry)
    if len(entries) > KEPT_PER_NODE:
        del entries[0]


def keep_failure(
    kept: list[JudgeFailure], seq: int, kind: str, node_id: str | None, reason: str
) -> None:
    """Add a judge failure to the newest ones kept, dropping the oldest past KEPT_FAILURES."""
    kept.append(JudgeFailure(seq=seq, kind=kind, node_id=node_id, reason=reason))
    if len(kept) > KEPT_FAILURES:
        del kept[0]


def overrules(after: Verdict, before: VerdictEntry | Verdict | None) -> bool:
    """Whether ``after`` is a node's ``max_iterations`` bound accepting its outputs over
    ``before``, the RETRY its judge ruled on that same turn and recorded just before it
    (llm/_turn_loop.py): a check that ran and was not passed (kind ``overruled``). A tool
    turn's mark (level ``bail_out``, action retry) was no check, nor a conversation
    node's wait for its user (a structural RETRY with nothing to fix: a client-facing
    node with no output keys, which its bound ends as the seed says)."""
    return (
        before is not None
        and after.level == "max_iterations"
        and after.action == "accept"
        and before.action == "retry"
        and before.level != "bail_out"
        and (before.level != "structural" or bool(before.feedback))
        and before.iteration == after.iteration
    )


def check_failure(body: EventBody) -> tuple[str, str] | None:
    """``(kind, reason)`` of the check that did not run which ``body`` records in an
    ``error`` of its own (a branch judge's call, a round's selection, a verifier's
    evaluator), or None. The fold and the metrics both count by it."""
    error = getattr(body, "error", None)
    if error is None:
        return None
    if isinstance(body, BranchesJudged | BranchesSelected):
        return "branch_judge", error
    if isinstance(body, VerificationRecorded):
        return "verify", error
    return None


def goal_failures(goal_outcome: object) -> list[str]:
    """Why each criterion the goal's evaluator was to score was not scored: its ``error``
    in a recorded scorecard (``run.finished``'s ``goal_outcome``, plain data; anything
    else, a hand-written log's, has none)."""
    if not isinstance(goal_outcome, dict):
        return []
    criteria = goal_outcome.get("criteria")
    if not isinstance(criteria, list):
        return []
    return [
        f"criterion {item.get('id')}: {item['error']}"
        for item in criteria
        if isinstance(item, dict) and item.get("error")
    ]
