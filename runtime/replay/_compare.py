"""Set a replay's lanes beside the recorded ones and say, in words, why they differ.

Each lane (``_lanes``) is compared in order. The first difference in a lane is a
:class:`Divergence`; what follows it in that lane is its consequence and is not reported
again. Its reason names the decision, and shows the values that differ; two values whose
shortened forms look the same are shown around their first difference.
"""

from __future__ import annotations

import bisect
import reprlib
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from eventstore import EventBody, event_tag

from ..events._catalogue import (
    BranchesForked,
    BranchesJoined,
    EdgeTaken,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunFinished,
    RunPaused,
    StallDetected,
    Verdict,
    VerificationRecorded,
)
from ..spec._model import GraphSpec
from ._lanes import VOLATILE, Item, by_lane
from ._report import Divergence

__all__ = ["compare"]

_LEVELS: Final = {"structural": "0", "quality": "2"}
_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
#: The longest value a reason shows as it is.
_SHORT: Final = 160
#: Characters shown on each side of two values' first difference.
_AROUND: Final = 24


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
    before = by_lane(recorded)
    after = by_lane(replayed)
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

    def why(self, r: Item | None, n: Item | None) -> str:
        old = None if r is None else r.body
        new = None if n is None else n.body
        # The values as compared (times inside them left out), to show where they differ.
        was: Any = None if r is None else r.key
        now: Any = None if n is None else n.key
        match old, new:
            case (Verdict(), Verdict()):
                if old.action != new.action:
                    return self.verdict(new, f" where {old.action.upper()} was recorded")
                before, after, at = _contrast(old.feedback, new.feedback, _short)
                recorded = f"level {_level(old.level)}: {before}" + (f"; {at}" if at else "")
                return f"{self.verdict(new, shown=after)} (recorded: {recorded})"
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
                    verb = "passes" if new.passed else "fails"
                    return f"verifier `{new.node_id}` now {verb}: {reasoning}"
                head = f"verifier `{new.node_id}` gives another result"
                if reasoning != _short(str(old.result.get("reasoning", ""))):
                    return f"{head}: {reasoning}"
                return f"{head}{_apart(was.result, now.result)}"
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
                before, after, at = _contrast(was.value, now.value, _repr)
                recorded = f" where {before} was recorded ({at})" if at else ""
                return f"memory key `{new.key}` is now written {after}{recorded}"
            case (None, MemoryWritten()):
                return (
                    f"memory key `{new.key}` is now written {_repr(new.value)} by "
                    f"`{new.node_id}`; the recorded run did not write it there"
                )
            case (MemoryWritten(), None):
                return f"memory key `{old.key}` is not written by `{old.node_id}` now"
            case (_, None):
                return f"{_describe(old)} was recorded; the replay has nothing in its place"
            case _:
                shown = _describe(new)
                if r is not None and n is not None and shown == _describe(old):
                    return f"now {shown}{_apart(r.form, n.form)}"
                return f"now {shown} where {_describe(old)} was recorded"

    def verdict(self, verdict: Verdict, where: str = "", shown: str | None = None) -> str:
        """``shown``: its feedback as the reason shows it (default: shortened)."""
        if shown is None:
            shown = _short(verdict.feedback)
        feedback = f": {shown}" if verdict.feedback else ""
        return f"verdict {verdict.action.upper()} at level {_level(verdict.level)}{where}{feedback}"

    def stall_threshold(self, node_id: str) -> int | str:
        return self.graph.node(node_id).stall_threshold if node_id in self.nodes else "?"

    def stall(self, stall: StallDetected) -> str:
        return f"stall detected at turn {stall.iteration} ({_short(stall.signature)})"

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
            head = f"edge `{_short(old.reason)}` now false"
            if now and now[0] != old.reason:
                before, after, at = _contrast(old.reason, now[0], _short)
                head = f"edge `{before}` now false (its expression is now `{after}`"
                head += f"; {at})" if at else ")"
        elif old.condition == "llm_decide":
            head = f"the llm_decide choice of `{old.target}` after `{old.source}` is not made now"
        else:
            head = f"edge from `{old.source}` to `{old.target}` ({old.condition}) not taken now"
        if isinstance(new, EdgeTaken):
            if new.target == old.target:
                return f"edge to `{new.target}` now fires as {new.condition} `{_short(new.reason)}`"
            shown = f" `{_short(new.reason)}`" if new.condition == "conditional" else ""
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
    """``value`` for a one-line reason: a string as its words, another value as
    :func:`_repr` shows it."""
    if not isinstance(value, str):
        return _repr(value)
    text = " ".join(value.split())
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _repr(value: Any) -> str:
    """``value``'s repr with its long strings and containers cut (head and tail)."""
    text = _REPR.repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _contrast(old: Any, new: Any, show: Callable[[Any], str]) -> tuple[str, str, str]:
    """``old`` and ``new`` as ``show`` shortens them, and ``""``; when their shortened
    forms look the same but they differ, each around their first difference instead, and
    where that is (:func:`_around`)."""
    before, after = show(old), show(new)
    if before != after or old == new:
        return before, after, ""
    return _around(old, new)


def _apart(old: Any, new: Any) -> str:
    """``": NEW where OLD was recorded (first difference at ...)"``, each around the
    first difference of ``old`` and ``new``; ``""`` when they read the same."""
    before, after, at = _around(old, new)
    return f": {after} where {before} was recorded ({at})" if at else ""


def _around(old: Any, new: Any) -> tuple[str, str, str]:
    """Both values cut to a window around their first difference (``'...'`` marks a
    cut), and where it is: strings as they are, other values as their JSON text."""
    texts = _text(old, new)
    if texts is None:
        return _repr(old), _repr(new), ""
    before, after = texts
    pairs = zip(before, after, strict=False)
    at = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(before), len(after)))
    start = max(0, at - _AROUND)
    of = "" if isinstance(old, str) and isinstance(new, str) else " of their JSON"
    where = f"first difference at offset {at}{of}"
    return _window(before, start, at), _window(after, start, at), where


def _text(old: Any, new: Any) -> tuple[str, str] | None:
    """The texts to find the first difference in, None when they are the same."""
    if isinstance(old, str) and isinstance(new, str):
        texts = (old, new)
    else:
        try:
            texts = (msgspec.json.encode(old).decode(), msgspec.json.encode(new).decode())
        except (TypeError, msgspec.EncodeError):
            texts = (repr(old), repr(new))
    return None if texts[0] == texts[1] else texts


def _window(text: str, start: int, at: int) -> str:
    end = at + _AROUND
    cut = ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
    return repr(cut)  # quoted, its newlines escaped: one line


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
            data = {k: v for k, v in msgspec.to_builtins(body).items() if k not in VOLATILE}
            return f"{event_tag(body)} {_short(data)}"
