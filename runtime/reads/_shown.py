"""How a read shows what a log holds: a pause's waiting-for, an event's nodes, a broken
chain as a :class:`ChainStatus`. Pure functions of the log's facts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from eventstore import CorruptLogError, Event, UnknownEventError

from ..events._catalogue import EdgeTaken, RunForked
from ..events._state import RunState
from ..events._tokens import PURPOSES, add_usage, paid
from ..providers._base import Usage
from ._records import ChainStatus, JudgeFailures, JudgeFailureView, PauseView, Tokens

__all__ = [
    "broken_chain",
    "judge_failures",
    "node_of",
    "paid_tokens",
    "pause_view",
    "waiting_for",
]


def own_events(events: Sequence[Event]) -> Sequence[Event]:
    """The events a run recorded itself: a fork's copied events (those before its
    ``run.forked``) are its source's, counted in the source's report, not again in the
    fork's (its turns, tokens and verdicts). (A fork of a fork copied its source's marker
    too: its own is the last.)"""
    for index in range(len(events) - 1, -1, -1):
        if isinstance(events[index].body, RunForked):
            return events[index + 1 :]
    return events


def paid_tokens(events: Sequence[Event]) -> tuple[Tokens, dict[str, Tokens]]:
    """The tokens of every paid model call ``events`` record, in all and by purpose (see
    ``RunReport``): of the run's own events only (:func:`own_events`)."""
    by_purpose: dict[str, Usage] = {}
    for event in own_events(events):
        call = paid(event.body)
        if call is not None:
            purpose, usage = call
            by_purpose[purpose] = add_usage(by_purpose.get(purpose), usage) or usage
    total: Usage | None = None
    for usage in by_purpose.values():
        total = add_usage(total, usage)
    shown: dict[str, Tokens] = {p: _tokens(by_purpose[p]) for p in PURPOSES if p in by_purpose}
    return _tokens(total or Usage()), shown


def _tokens(usage: Usage) -> Tokens:
    return Tokens(
        input=usage.input_tokens,
        output=usage.output_tokens,
        input_cached=usage.input_cached,
        input_cache_write=usage.input_cache_write,
    )


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


def pause_view(state: RunState) -> PauseView | None:
    paused = state.paused
    if paused is None or state.status != "paused":
        return None
    view = waiting_for(state.graph, paused.node_id, state.memory)
    return msgspec.structs.replace(view, reason=paused.reason)


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
