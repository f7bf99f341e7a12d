"""Compare a replay's events with the recorded ones, lane by lane, and say why they differ.

Concurrent branches interleave differently from one execution to the next, so the two
logs are not compared as one sequence: each event belongs to a lane (a node's events,
one parallel branch's events of an LLM node, the edges leaving one node, the run's own
events), and each lane is compared in order.
The first difference in a lane is a :class:`Divergence`; what follows it in that lane is
its consequence and is not reported again. Timings, token counts, model names and the
times inside results are not compared; facts the runtime decides are.
"""

from __future__ import annotations

import bisect
import re
import reprlib
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from eventstore import EventBody, SnapshotTaken, event_tag

from ..events._catalogue import (
    BranchesForked,
    BranchesJoined,
    BranchFinished,
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
    StallDetected,
    Verdict,
    VerificationRecorded,
)
from ..spec._model import GraphSpec
from ._report import Divergence

__all__ = ["LaneCounter", "compare", "lane_counts"]

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
_VOLATILE: Final = frozenset(
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
_LEVELS: Final = {"structural": "0", "quality": "2"}
#: A result's time as a node's messages show it (its inputs, a phase transition's outputs).
_TIMED: Final = re.compile(r'("evaluated_at":\s*")[^"]*')
_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60


class _Item:
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
        return {k: v for k, v in data.items() if k not in _VOLATILE}


_CLEARED: dict[type[EventBody], dict[str, None]] = {}


def _key(body: EventBody) -> EventBody:
    cls = type(body)
    cleared = _CLEARED.get(cls)
    if cleared is None:
        cleared = _CLEARED[cls] = dict.fromkeys(f for f in cls.__struct_fields__ if f in _VOLATILE)
    # Times inside values (a verifier's result, a goal outcome, messages) differ each run.
    if isinstance(body, VerificationRecorded):
        body = msgspec.structs.replace(body, result=_untimed(body.result))
    elif isinstance(body, RunFinished) and body.goal_outcome:
        body = msgspec.structs.replace(body, goal_outcome=_untimed(body.goal_outcome))
    elif isinstance(body, MemoryWritten | OutputSet) and isinstance(body.value, dict | list):
        body = msgspec.structs.replace(body, value=_untimed(body.value))
    elif isinstance(body, MessageAdded):
        body = msgspec.structs.replace(body, content=_TIMED.sub(r"\1", body.content))
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


def _lanes(pairs: Sequence[tuple[int, EventBody]]) -> dict[str, list[_Item]]:
    lanes: dict[str, list[_Item]] = {}
    unended: dict[str, tuple[NodeStarted, int]] = {}  # a lane's unended attempt, its index
    # What a cut attempt recorded after its node.started (less a cancel's flush) that its
    # start again records anew, up to the first event it does not repeat: counted once.
    repeats: dict[str, list[_Item]] = {}
    for seq, body in pairs:
        lane = _lane(body)
        if lane is None:
            continue
        items = lanes.setdefault(lane, [])
        if isinstance(body, RunPaused) and items and items[-1].body == body:
            continue  # waiting at the same gate again (after a resume there, a fork)
        item = _Item(seq, body)
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
    return lanes


def lane_counts(
    pairs: Sequence[tuple[int, EventBody]], before: Sequence[int]
) -> list[dict[str, int]]:
    """For each seq of ``before``: how many events each lane of ``pairs`` holds before
    it, as :func:`compare` counts them (lanes with none left out)."""
    lanes = {lane: [item.seq for item in items] for lane, items in _lanes(pairs).items()}
    counts: list[dict[str, int]] = []
    for seq in before:
        held = {lane: bisect.bisect_left(seqs, seq) for lane, seqs in lanes.items()}
        counts.append({lane: n for lane, n in held.items() if n})
    return counts


class LaneCounter:
    """The events of each lane of one execution's log as it grows, counted as
    :func:`compare` counts them (a pause at the same gate again counts once)."""

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


def compare(
    recorded: Sequence[tuple[int, EventBody]],
    replayed: Sequence[tuple[int, EventBody]],
    graph: GraphSpec,
    recorded_graph: GraphSpec,
    *,
    complete: bool,
) -> list[Divergence]:
    """The divergences of ``replayed`` from ``recorded`` (pairs of seq and body), in
    recorded order. ``complete`` is False when the replay stopped before the end: a lane
    it did not finish is then no divergence."""
    nodes = {node.id for node in graph.nodes}
    before = _lanes(recorded)
    after = _lanes(replayed)
    matched: dict[int, int] = {}  # replayed seq -> recorded seq of its equal event
    found: list[tuple[str, int]] = []
    for lane in [*before, *(name for name in after if name not in before)]:
        old, new = before.get(lane, []), after.get(lane, [])
        index = 0
        while index < len(old) and index < len(new) and old[index].key == new[index].key:
            matched[new[index].seq] = old[index].seq
            index += 1
        if index == len(old) == len(new):
            continue
        if index == len(new) and not complete and not _gone(old[index].body, nodes):
            continue  # the replay stopped before it got there
        found.append((lane, index))
        if index < len(old) and index < len(new):
            matched[new[index].seq] = old[index].seq  # where its consequences anchor
    seqs = [seq for seq, _ in recorded]
    divergences: list[tuple[int, int, Divergence]] = []
    for lane, index in found:
        old, new = before.get(lane, []), after.get(lane, [])
        r = old[index] if index < len(old) else None
        n = new[index] if index < len(new) else None
        if r is not None:
            seq = r.seq
        else:  # the recorded event in whose place it comes: the one after its anchor
            assert n is not None
            anchor = max((s for k, s in matched.items() if k < n.seq), default=seqs[0])
            at = bisect.bisect_right(seqs, anchor)
            seq = seqs[min(at, len(seqs) - 1)]
        divergence = Divergence(
            seq=seq,
            kind=event_tag((r or n).body),  # type: ignore[union-attr]
            recorded=None if r is None else r.form,
            now=None if n is None else n.form,
            reason=_Reasons(graph, recorded_graph).why(r, n),
        )
        divergences.append((seq, 0 if r is not None else 1, divergence))
    divergences.sort(key=lambda item: item[:2])
    return [divergence for _, _, divergence in divergences]


def _gone(body: EventBody, nodes: set[str]) -> bool:
    """Whether ``body`` is about a node today's graph no longer has."""
    if isinstance(body, EdgeTaken):
        return body.target not in nodes or body.source not in nodes
    node = getattr(body, "node_id", None)
    return isinstance(node, str) and node not in nodes


class _Reasons:
    """Words for one divergence, knowing today's graph and the recorded one."""

    def __init__(self, graph: GraphSpec, recorded_graph: GraphSpec) -> None:
        self.graph = graph
        self.nodes = {node.id for node in graph.nodes}
        self.recorded_nodes = {node.id for node in recorded_graph.nodes}

    def why(self, r: _Item | None, n: _Item | None) -> str:
        old = None if r is None else r.body
        new = None if n is None else n.body
        match old, new:
            case (Verdict(), Verdict()):
                if old.action != new.action:
                    return self.verdict(new, f" where {old.action.upper()} was recorded")
                recorded = f"level {_level(old.level)}: {_short(old.feedback)}"
                return f"{self.verdict(new)} (recorded: {recorded})"
            case (StallDetected(), _) if not isinstance(new, StallDetected):
                threshold = self.stall_threshold(old.node_id)
                return (
                    f"no stall now: {self.stall(old)} was recorded, and node `{old.node_id}` "
                    f"now stalls after {threshold} identical turns"
                )
            case (_, Verdict()) | (_, StallDetected()):
                assert isinstance(new, Verdict | StallDetected)
                shown = self.verdict(new) if isinstance(new, Verdict) else self.stall(new)
                return f"{shown} where {_describe(old)} was recorded"
            case (Verdict(), _):
                return f"{_describe(new)} where verdict {old.action.upper()} was recorded"
            case (EdgeTaken(), _):
                return self.edge(old, new)
            case (None, EdgeTaken()):
                return f"edge from `{new.source}` to `{new.target}` now fires ({new.condition})"
            case (NodeStarted(), None):
                return self.absent(old.node_id)
            case (None, NodeStarted()):
                new_here = "" if new.node_id in self.recorded_nodes else " (new in the graph)"
                return f"node `{new.node_id}`{new_here} now runs; the recorded run did not run it"
            case (VerificationRecorded(), VerificationRecorded()):
                reasoning = _short(str(new.result.get("reasoning", "")))
                if old.passed != new.passed:
                    now = "passes" if new.passed else "fails"
                    return f"verifier `{new.node_id}` now {now}: {reasoning}"
                return f"verifier `{new.node_id}` gives another result: {reasoning}"
            case (_, NodeFailed()):
                return f"node `{new.node_id}` now fails: {_short(new.error)}"
            case (NodeFailed(), _):
                return f"node `{old.node_id}` failed in the recorded run, now {_describe(new)}"
            case (BranchesForked(), BranchesForked()):
                return (
                    f"the fan-out from `{new.source}` now goes to {new.targets} with policy "
                    f"{new.policy} (recorded {old.targets}, {old.policy})"
                )
            case (BranchesJoined(), BranchesJoined()):
                return (
                    f"the join now has completed {new.completed}, failed {new.failed} "
                    f"(recorded completed {old.completed}, failed {old.failed})"
                )
            case (RunFinished(), RunFinished()):
                if (old.status, old.quality) != (new.status, new.quality):
                    return (
                        f"the run now ends {new.status} ({new.quality}) where "
                        f"{old.status} ({old.quality}) was recorded"
                    )
                return _goal_change(old, new)
            case (MemoryWritten(), MemoryWritten()) if old.key == new.key:
                return f"memory key `{new.key}` is now written {_REPR.repr(new.value)}"
            case (None, MemoryWritten()):
                return (
                    f"memory key `{new.key}` is now written {_REPR.repr(new.value)} by "
                    f"`{new.node_id}`; the recorded run did not write it there"
                )
            case (MemoryWritten(), None):
                return f"memory key `{old.key}` is not written by `{old.node_id}` now"
            case (_, None):
                return f"{_describe(old)} was recorded; the replay has nothing in its place"
            case _:
                return f"now {_describe(new)} where {_describe(old)} was recorded"

    def verdict(self, verdict: Verdict, where: str = "") -> str:
        feedback = f": {_short(verdict.feedback)}" if verdict.feedback else ""
        return f"verdict {verdict.action.upper()} at level {_level(verdict.level)}{where}{feedback}"

    def stall_threshold(self, node_id: str) -> int | str:
        return self.graph.node(node_id).stall_threshold if node_id in self.nodes else "?"

    def stall(self, stall: StallDetected) -> str:
        return f"stall detected at turn {stall.iteration} ({stall.signature})"

    def absent(self, node: str) -> str:
        if node not in self.nodes:
            return f"node `{node}` is no longer in the graph"
        return f"node `{node}` does not run now"

    def edge(self, old: EdgeTaken, new: EdgeBody | None) -> str:
        if old.target not in self.nodes:
            head = f"node `{old.target}` is no longer in the graph"
        elif old.condition == "conditional":
            now = [
                e.expression
                for e in self.graph.edges
                if e.source == old.source
                and e.target == old.target
                and e.condition == old.condition
            ]
            head = f"edge `{old.reason}` now false"
            if now and now[0] != old.reason:
                head += f" (its expression is now `{now[0]}`)"
        elif old.condition == "llm_decide":
            head = f"the llm_decide choice of `{old.target}` after `{old.source}` is not made now"
        else:
            head = f"edge from `{old.source}` to `{old.target}` ({old.condition}) not taken now"
        if isinstance(new, EdgeTaken):
            if new.target == old.target:
                return f"edge to `{new.target}` now fires as {new.condition} `{new.reason}`"
            shown = f" `{new.reason}`" if new.condition == "conditional" else ""
            return f"{head}; now edge {new.condition}{shown} to `{new.target}`"
        if new is None:
            return head
        return f"{head}; now {_describe(new)}"


EdgeBody = EventBody


def _goal_change(old: RunFinished, new: RunFinished) -> str:
    """What changed in the run's end when its status and quality did not."""
    if old.total_retries != new.total_retries:
        return f"the run now ends with {new.total_retries} retries ({old.total_retries} recorded)"
    before = {c.get("id"): c for c in (old.goal_outcome or {}).get("criteria", [])}
    changes = []
    for criterion in (new.goal_outcome or {}).get("criteria", []):
        was = before.get(criterion.get("id"), {})
        if criterion.get("met") != was.get("met") or criterion.get("score") != was.get("score"):
            met = {True: "met", False: "not met"}.get(criterion.get("met"), "unscored")
            why = criterion.get("reasoning") or f"score {criterion.get('score')}"
            changes.append(f"goal criterion `{criterion.get('id')}` now {met}: {_short(why)}")
    return "; ".join(changes) or "the run's goal outcome changed"


def _level(level: str) -> str:
    return _LEVELS.get(level, level)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else _REPR.repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _describe(body: EventBody | None) -> str:
    if body is None:
        return "nothing"
    match body:
        case Verdict():
            return f"verdict {body.action.upper()} at level {_level(body.level)}"
        case NodeCompleted():
            return f"node `{body.node_id}` completed"
        case NodeStarted():
            return f"node `{body.node_id}` started (visit {body.visit})"
        case NodeFailed():
            return f"node `{body.node_id}` failed ({body.error_type})"
        case EdgeTaken():
            return f"edge to `{body.target}`"
        case RunPaused():
            return f"a pause ({body.reason}) at `{body.node_id}`"
        case RunFinished():
            return f"the run's end ({body.status}, {body.quality})"
        case _:
            data = {k: v for k, v in msgspec.to_builtins(body).items() if k not in _VOLATILE}
            return f"{event_tag(body)} {_short(data)}"
