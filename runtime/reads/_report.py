"""A run for an auditor (``RunReader.report``: ``magistrate show``): what its whole log
says of where it went, what it cost, who decided its gates and what failed. Pure
functions of the log's events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from eventstore import Event, EventStore, RunInfo

from ..control._ownership import listed_ownership
from ..events._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    EdgeTaken,
    LlmTurn,
    NodeFailed,
    RunFinished,
    RunForked,
    Verdict,
)
from ..events._state import fold
from ..events._tokens import PURPOSES, add_usage, paid
from ..providers._base import Usage
from ._records import ChainStatus, DecisionView, NodeFailureView, RunReport, Tokens
from ._shown import judge_failures, pause_view

__all__ = ["decisions", "node_failures", "own_events", "paid_tokens", "run_report"]


def run_report(
    events: Sequence[Event], chain: ChainStatus, info: RunInfo | None, store: EventStore
) -> RunReport:
    """The report of the run whose whole log is ``events`` (at least one), ``chain`` the
    check of it and ``info`` its listing row (None: the store lost it)."""
    state = fold(events)
    own = own_events(events)  # a fork's: not those copied from its source
    verdicts: Counter[str] = Counter(
        e.body.action for e in own if isinstance(e.body, Verdict) and e.body.level != "bail_out"
    )
    turns = sum(1 for e in own if isinstance(e.body, LlmTurn))
    tokens, by_purpose, by_node = paid_tokens(events)
    return RunReport(
        run_id=events[0].run_id,
        graph=(state.graph or {}).get("id"),
        graph_hash=state.graph_hash,
        status=state.status,
        quality=state.quality,
        owner=None if info is None else info.owner,
        ownership=None if info is None else listed_ownership(info, store),
        created=events[0].ts,
        updated=events[-1].ts,
        events=len(events),
        path=state.path,
        pending=state.pending,
        paused=pause_view(state),
        error=state.error,
        total_retries=state.total_retries,
        turns=turns,
        tokens=tokens,
        tokens_by_purpose=by_purpose,
        tokens_by_node=by_node,
        decisions=decisions(events),
        node_failures=node_failures(events),
        verdicts=dict(verdicts),
        goal_outcome=state.goal_outcome,
        forked_from=state.forked_from,
        unrunnable=list(state.unrunnable),
        listed_status=None if info is None else info.status,
        chain=chain,
        judge_failures=judge_failures(state),
        draining=None if info is None else info.draining,
        draining_since=None if info is None else info.draining_since,
    )


def own_events(events: Sequence[Event]) -> Sequence[Event]:
    """The events a run recorded itself: a fork's copied events (those before its
    ``run.forked``) are its source's, counted in the source's report, not again in the
    fork's (its turns, tokens and verdicts). (A fork of a fork copied its source's marker
    too: its own is the last.)"""
    for index in range(len(events) - 1, -1, -1):
        if isinstance(events[index].body, RunForked):
            return events[index + 1 :]
    return events


def paid_tokens(
    events: Sequence[Event],
) -> tuple[Tokens, dict[str, Tokens], dict[str, Tokens]]:
    """The tokens of every paid model call ``events`` record, in all, by purpose and by
    node (see ``RunReport``): of the run's own events only (:func:`own_events`)."""
    by_purpose: dict[str, Usage] = {}
    by_node: dict[str, Usage] = {}
    for event in own_events(events):
        call = paid(event.body)
        if call is None:
            continue
        purpose, usage = call
        by_purpose[purpose] = add_usage(by_purpose.get(purpose), usage) or usage
        body = event.body
        # A route is paid for by the node it leaves; the goal's evaluator by no node.
        node = body.source if isinstance(body, EdgeTaken) else getattr(body, "node_id", None)
        if isinstance(node, str) and not isinstance(body, RunFinished):
            by_node[node] = add_usage(by_node.get(node), usage) or usage
    total: Usage | None = None
    for usage in by_purpose.values():
        total = add_usage(total, usage)
    shown: dict[str, Tokens] = {p: _tokens(by_purpose[p]) for p in PURPOSES if p in by_purpose}
    nodes = {node: _tokens(usage) for node, usage in by_node.items()}
    return _tokens(total or Usage()), shown, nodes


def _tokens(usage: Usage) -> Tokens:
    return Tokens(
        input=usage.input_tokens,
        output=usage.output_tokens,
        input_cached=usage.input_cached,
        input_cache_write=usage.input_cache_write,
    )


def decisions(events: Sequence[Event]) -> list[DecisionView]:
    """Every approval and rejection ``events`` record, in order."""
    found: list[DecisionView] = []
    for event in events:
        body = event.body
        if isinstance(body, ApprovalGranted):
            found.append(
                DecisionView(
                    seq=event.seq,
                    ts=event.ts,
                    decision="approved",
                    node_id=body.node_id,
                    by=body.by,
                    input=body.input,
                )
            )
        elif isinstance(body, ApprovalRejected):
            found.append(
                DecisionView(
                    seq=event.seq,
                    ts=event.ts,
                    decision="rejected",
                    node_id=body.node_id,
                    by=body.by,
                    reason=body.reason,
                )
            )
    return found


def node_failures(events: Sequence[Event]) -> list[NodeFailureView]:
    """The nodes ``events`` record as failed for good (no retry left), in order."""
    return [
        NodeFailureView(
            seq=event.seq,
            node_id=event.body.node_id,
            attempt=event.body.attempt,
            error_type=event.body.error_type,
            error=event.body.error,
        )
        for event in events
        if isinstance(event.body, NodeFailed) and not event.body.will_retry
    ]
