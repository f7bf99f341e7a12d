"""The judge verdicts and stall warnings a run's state keeps: the last verdict of each
node, counts by action, and each node's newest entries (bounded, so a long run's state and
its snapshots stay small)."""

from __future__ import annotations

from typing import Any

import msgspec

from ._catalogue import StallDetected, Verdict

__all__ = [
    "KEPT_PER_NODE",
    "StallEntry",
    "VerdictEntry",
    "VerdictRecord",
    "keep",
    "stall_entry",
    "verdict_entry",
    "verdict_record",
]

#: Verdicts (and stall warnings) of one node a state keeps, the newest; counts stay exact.
KEPT_PER_NODE = 500


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
