"""Which events of a log are compared, in which lane, and as what.

Concurrent branches interleave differently from one execution to the next, so a replay's
log and the recorded one are not compared as one sequence: each event belongs to a lane
(a node's events, one parallel branch's events of an LLM node, the edges leaving one
node, the run's own events), and ``_compare`` sets each lane beside its recorded twin.
An event is compared as its key: timings, token counts, model names and the times inside
results are cleared; facts the runtime decides are kept.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from eventstore import EventBody, SnapshotTaken

from ..events._catalogue import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
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
    Verdict,
    VerificationRecorded,
)

__all__ = ["VOLATILE", "Item", "LaneCounter", "by_lane", "lane_counts"]

_SKIPPED: Final = (
    RunStarted,
    PauseRequested,
    GraphReplaced,
    RunResumed,
    RunForked,
    RunUnrunnable,
    InputInjected,
    RunCancelled,
    SnapshotTaken,
)
VOLATILE: Final = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "latency_ms",
        "model",
        "input_cached",
        "input_cache_write",
        "goal_input_tokens",
        "goal_output_tokens",
        "goal_input_cached",
        "goal_input_cache_write",
        "usage",  # edge.taken's: an llm_decide call's tokens
        "prompt_tokens",
        "error",
        "confidence",
    }
)
#: A result's time as a node's messages show it (its inputs, a phase transition's outputs).
_TIMED: Final = re.compile(r'("evaluated_at":\s*")[^"]*')


class Item:
    """One event of a lane: its seq, its body, and the body as compared (volatile fields
    cleared)."""

    __slots__ = ("body", "key", "seq")

    def __init__(self, seq: int, body: EventBody) -> None:
        self.seq = seq
        self.body = body
        self.key = _key(body)

    @property
    def form(self) -> dict[str, Any]:
        """The compared body as builtins (for the report)."""
        data: dict[str, Any] = msgspec.to_builtins(self.key)
        return {k: v for k, v in data.items() if k not in VOLATILE}


_CLEARED: dict[type[EventBody], dict[str, None]] = {}


def _key(body: EventBody) -> EventBody:
    cls = type(body)
    cleared = _CLEARED.get(cls)
    if cleared is None:
        cleared = _CLEARED[cls] = dict.fromkeys(f for f in cls.__struct_fields__ if f in VOLATILE)
    # Times inside values (a verifier's result, a goal outcome, messages) differ each run.
    if isinstance(body, VerificationRecorded):
        body = msgspec.structs.replace(body, result=_untimed(body.result))
    elif isinstance(body, RunFinished) and body.goal_outcome:
        body = msgspec.structs.replace(body, goal_outcome=_untimed(body.goal_outcome))
    elif isinstance(body, MemoryWritten | OutputSet) and isinstance(body.value, dict | list):
        body = msgspec.structs.replace(body, value=_untimed(body.value))
    elif isinstance(body, MessageAdded):
        body = msgspec.structs.replace(body, content=_TIMED.sub(r"\1", body.content))
    elif isinstance(body, BranchesSelected) and len(body.candidates) == 1:
        body = msgspec.structs.replace(body, reason="")  # the only answer, however told
    return msgspec.structs.replace(body, **cleared) if cleared else body


def _lane(body: EventBody) -> str | None:
    if isinstance(body, _SKIPPED):
        return None
    if isinstance(body, RunPaused):
        return None if body.reason == "user" else "run"
    if isinstance(body, Verdict) and body.level == "bail_out":
        return None  # a tool turn's mark, which its turn tells (older runs lack some)
    if isinstance(body, EdgeTaken):
        return f"edges {body.source}"
    if isinstance(body, BranchTurn | BranchToolResult | BranchFinished):
        # An LLM node's parallel branches run concurrently: each is a lane of its own.
        return f"node {body.node_id} branch {body.visit}/{body.round}/{body.branch}"
    node = getattr(body, "node_id", None)
    if isinstance(node, str):
        return f"node {node}"
    return "run"


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "evaluated_at"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def by_lane(pairs: Sequence[tuple[int, EventBody]]) -> dict[str, list[Item]]:
    """The events of ``pairs`` (seq and body) that are compared, by lane, in order: a
    pause at the same gate again, and what an attempt cut short and started again
    records anew, count once."""
    lanes: dict[str, list[Item]] = {}
    unended: dict[str, tuple[NodeStarted, int]] = {}  # a lane's unended attempt, its index
    # What a cut attempt recorded after its node.started (less a cancel's flush) that its
    # start again records anew, up to the first event it does not repeat: counted once.
    repeats: dict[str, list[Item]] = {}
    for seq, body in pairs:
        lane = _lane(body)
        if lane is None:
            continue
        items = lanes.setdefault(lane, [])
        if isinstance(body, RunPaused) and items and items[-1].body == body:
            continue  # waiting at the same gate again (after a resume there, a fork)
        item = Item(seq, body)
        repeated = repeats.get(lane)
        if repeated:
            if repeated[0].key == item.key:
                del repeated[0]
                continue
            del repeats[lane]
        if isinstance(body, NodeStarted):
            started = unended.get(lane)
            if started is not None and started[0] == body:
                # The attempt a cancel, a crash or a fork cut, started again: one execution.
                while len(items) > started[1] + 1 and isinstance(items[-1].body, MemoryWritten):
                    items.pop()
                repeats[lane] = items[started[1] + 1 :]
                continue
            unended[lane] = (body, len(items))
        elif isinstance(body, NodeCompleted | NodeFailed):
            unended.pop(lane, None)
        items.append(item)
    for items in lanes.values():
        _lone_rounds(items)
    return lanes


def _lone_rounds(items: list[Item]) -> None:
    """Drop from a node's lane the branch judge's call (and its warning) in a round that
    had one answer: an older run asked the judge there, which now is not asked (it could
    not change the winner); a call that failed still shows on the run's quality."""
    lone = {
        (i.body.visit, i.body.round)
        for i in items
        if isinstance(i.body, BranchesSelected) and len(i.body.candidates) == 1
    }
    if lone:
        items[:] = [
            i
            for i in items
            if not isinstance(i.body, BranchesJudged | BranchJudgeWarning)
            or (i.body.visit, i.body.round) not in lone
        ]


def lane_counts(
    pairs: Sequence[tuple[int, EventBody]], before: Sequence[int]
) -> list[dict[str, int]]:
    """For each seq of ``before``: how many events each lane of ``pairs`` holds before
    it, as :func:`by_lane` counts them (lanes with none left out)."""
    lanes = {lane: [item.seq for item in items] for lane, items in by_lane(pairs).items()}
    counts: list[dict[str, int]] = []
    for seq in before:
        held = {lane: bisect.bisect_left(seqs, seq) for lane, seqs in lanes.items()}
        counts.append({lane: n for lane, n in held.items() if n})
    return counts


class LaneCounter:
    """The events of each lane of one execution's log as it grows, counted as
    :func:`by_lane` counts them (a pause at the same gate again counts once)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._run: EventBody | None = None  # the run lane's last event

    def add(self, bodies: Sequence[EventBody]) -> None:
        for body in bodies:
            lane = _lane(body)
            if lane is None:
                continue
            if lane == "run":
                if isinstance(body, RunPaused) and body == self._run:
                    continue
                self._run = body
            self.counts[lane] = self.counts.get(lane, 0) + 1

    def reached(self, counts: dict[str, int]) -> bool:
        """Whether every lane holds at least the events ``counts`` gives it."""
        return all(self.counts.get(lane, 0) >= count for lane, count in counts.items())
