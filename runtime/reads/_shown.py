"""How a read shows what a log holds: a pause's waiting-for, an event's nodes, a broken
chain as a :class:`ChainStatus`. Pure functions of the log's facts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from eventstore import CorruptLogError, Event, UnknownEventError

from ..events._catalogue import EdgeTaken
from ..events._state import RunState
from ._records import ChainStatus, JudgeFailures, JudgeFailureView, PauseView

__all__ = [
    "LISTED_VALUES_BYTES",
    "broken_chain",
    "judge_failures",
    "listed_pause",
    "node_of",
    "pause_view",
    "waiting_for",
]

#: The JSON bytes of memory values a listing's row carries at most: a page of runs stays
#: light whatever a paused run holds; the run's detail gives the values whole.
LISTED_VALUES_BYTES = 2048


def node_of(event: Event) -> set[str]:
    body = event.body
    if isinstance(body, EdgeTaken):
        return {body.source, body.target}
    node = getattr(body, "node_id", None) or getattr(body, "source", None)
    return {node} if isinstance(node, str) else set()


def waiting_for(
    graph: dict[str, Any] | None, node_id: str | None, memory: Mapping[str, Any]
) -> PauseView:
    """What a node paused before reads (``reads``: its input keys, ``values``: those memory
    holds, with their values) and, of those, what memory still lacks (``waiting_for``:
    what an approval must give it), with the node's description and success criteria."""
    found: dict[str, Any] = {}
    if graph is not None and node_id is not None:
        for node in graph.get("nodes", []):
            if isinstance(node, dict) and node.get("id") == node_id:
                found = node
    listed = found.get("input_keys", [])
    keys = [str(k) for k in listed] if isinstance(listed, list) else []
    description = found.get("description", "")
    criteria = found.get("success_criteria", [])
    return PauseView(
        reason="",
        node_id=node_id,
        reads=keys,
        waiting_for=[k for k in keys if k not in memory],
        values={k: memory[k] for k in keys if k in memory},
        description=description if isinstance(description, str) else "",
        success_criteria=criteria if isinstance(criteria, list) else [],
    )


def pause_view(state: RunState, *, listed: bool = False) -> PauseView | None:
    """Why the run waits, if it is paused; ``listed``: as a listing's row carries it
    (:func:`listed_pause`)."""
    paused = state.paused
    if paused is None or state.status != "paused":
        return None
    view = waiting_for(state.graph, paused.node_id, state.memory)
    view = msgspec.structs.replace(view, reason=paused.reason)
    return listed_pause(view) if listed else view


def listed_pause(view: PauseView) -> PauseView:
    """``view`` as a listing's row carries it: the values that fit in
    ``LISTED_VALUES_BYTES`` of JSON together, in ``reads`` order, and the keys of the
    others in ``values_omitted``."""
    kept: dict[str, Any] = {}
    omitted: list[str] = []
    room = LISTED_VALUES_BYTES
    for key, value in view.values.items():
        # A string's JSON is at least as long as the string: a long one is not encoded.
        size = len(value) if isinstance(value, str) else 0
        if size <= room:
            size = len(msgspec.json.encode(value))
        if size <= room:
            kept[key] = value
            room -= size
        else:
            omitted.append(key)
    if not omitted:
        return view
    return msgspec.structs.replace(view, values=kept, values_omitted=omitted)


def judge_failures(state: RunState) -> JudgeFailures | None:
    """The run's checks that did not run, as its state counts and keeps them; None when
    every check ran."""
    if not state.judge_failures:
        return None
    return JudgeFailures(
        total=sum(state.judge_failures.values()),
        by_kind=dict(state.judge_failures),
        reasons=[
            JudgeFailureView(seq=f.seq, kind=f.kind, node_id=f.node_id, reason=f.reason)
            for f in state.judge_failure_reasons
        ],
    )


def broken_chain(
    exc: CorruptLogError | UnknownEventError, scope: Any, first: int, last: int
) -> ChainStatus:
    seq = exc.seq if isinstance(exc, CorruptLogError) else None
    reason = exc.reason if isinstance(exc, CorruptLogError) else str(exc)
    return ChainStatus(
        ok=False, scope=scope, from_seq=first, to_seq=last, broken_at=seq, reason=reason
    )
