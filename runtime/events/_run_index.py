"""Registers the event catalogue with the store's codec, with how each lifecycle event
changes the run listing's row (the store itself knows nothing of runs' meaning)."""

from __future__ import annotations

from eventstore import EventBody, RunIndex, RunIndexHook, register_event_type

from ._catalogue import (
    AnyEvent,
    ApprovalGranted,
    GraphReplaced,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
)

__all__: list[str] = []


def _started(body: RunStarted) -> RunIndex:
    graph_id = body.graph.get("id")
    return RunIndex("running", body.graph_hash, graph_id if isinstance(graph_id, str) else None)


def _replaced(body: GraphReplaced) -> RunIndex:
    graph_id = body.graph.get("id")
    return RunIndex(None, body.graph_hash, graph_id if isinstance(graph_id, str) else None)


def _finished(body: RunFinished) -> RunIndex:
    return RunIndex(body.status, quality=body.quality)


def _forked(body: RunForked) -> RunIndex:
    # Run ids hold no NUL (start refuses one); a hand-written log's source id may, and a
    # PostgreSQL listing cannot hold it: such a fork is listed without its origin.
    source = body.source_run_id
    return RunIndex(origin=None if "\x00" in source else source)


#: How each lifecycle event changes the run listing's row: its status, graph hash, graph id,
#: quality and origin. Only a finished run has a quality: going on (resumed, or started
#: again as a fork's copy) clears it. A fork's row names the run it was copied from.
_RUN_INDEX: dict[type[EventBody], RunIndexHook] = {
    RunStarted: _started,
    RunPaused: lambda body: RunIndex("paused"),
    RunResumed: lambda body: RunIndex("running", quality=""),
    ApprovalGranted: lambda body: RunIndex("running", quality=""),
    RunCancelled: lambda body: RunIndex("cancelled"),
    RunFinished: _finished,
    RunForked: _forked,
    GraphReplaced: _replaced,
}

for _cls in AnyEvent.__args__:
    register_event_type(_cls, run_index=_RUN_INDEX.get(_cls))
