"""Standard logging of what runs do, derived from their committed events.

Loggers: ``magistrate.runs`` (INFO: a run started, finished, paused, resumed, cancelled or
forked, a node failed for good, a stall; DEBUG: retries of a node) and
``magistrate.judge`` (DEBUG: every verdict with its level and feedback). Each record
carries ``run_id`` and, where there is one, ``node_id`` as ``extra`` attributes, for
structured handlers. The library configures no handler and prints nothing: an application
that configures none sees only Python's last-resort handler for WARNING and above, which
these records never reach.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from eventstore import EventBody

from ..events._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    NodeFailed,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    StallDetected,
    Verdict,
)

__all__ = ["log_run_events", "not_logged"]

_runs = logging.getLogger("magistrate.runs")
_judge = logging.getLogger("magistrate.judge")
#: Set while a replay runs the recorded run again in memory (see not_logged).
_replaying: ContextVar[bool] = ContextVar("magistrate_replaying", default=False)


@contextmanager
def not_logged() -> Iterator[None]:
    """Within it (and the tasks started in it), commits are not logged: a replay runs a
    recorded run again in an in-memory runtime, under the run's own id, and its events
    are not the run's (no "run X started" for a run that did not start again)."""
    token = _replaying.set(True)
    try:
        yield
    finally:
        _replaying.reset(token)


def log_run_events(run_id: str, bodies: Sequence[EventBody], seconds: float | None) -> None:
    """A commit observer (see ``RunLog``): log the batch's run-level events."""
    for body in bodies:
        if type(body) in _LOGGED:
            break
    else:
        return  # a plain step's batch (called on every commit): nothing to log
    if _replaying.get():
        return
    # DEBUG on magistrate.runs implies INFO.
    if not (_runs.isEnabledFor(logging.INFO) or _judge.isEnabledFor(logging.DEBUG)):
        return
    for index, body in enumerate(bodies):
        if type(body) is RunForked:
            bodies = bodies[index:]  # the events before it are a copy of another run's
            break
    for event in bodies:
        _log(run_id, event)


def _started(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    graph = body.graph.get("id")
    _runs.info("run %s started: graph %s", run_id, graph, extra={**extra, "graph_id": graph})


def _forked(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info(
        "run %s forked from run %s at seq %d",
        run_id,
        body.source_run_id,
        body.source_seq,
        extra={**extra, "source_run_id": body.source_run_id},
    )


def _finished(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info(
        "run %s finished: %s, quality %s",
        run_id,
        body.status,
        body.quality,
        extra={**extra, "status": body.status, "quality": body.quality},
    )


def _paused(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info("run %s paused (%s) before %s", run_id, body.reason, body.node_id, extra=extra)


def _resumed(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info("run %s resumed", run_id, extra=extra)


def _approved(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    who = {**extra, "by": body.by}
    _runs.info("run %s: approved by %s at gate %s", run_id, body.by, body.node_id, extra=who)


def _rejected(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    who = {**extra, "by": body.by}
    _runs.info(
        "run %s: rejected by %s at gate %s: %s",
        run_id,
        body.by,
        body.node_id,
        body.reason,
        extra=who,
    )


def _cancelled(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info("run %s cancelled at %s: %s", run_id, body.node_id, body.reason, extra=extra)


def _failed(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    if body.will_retry:
        _runs.debug(
            "run %s: node %s failed (attempt %d), will retry: %s",
            run_id,
            body.node_id,
            body.attempt,
            body.error,
            extra=extra,
        )
    else:
        _runs.info(
            "run %s: node %s failed: %s: %s",
            run_id,
            body.node_id,
            body.error_type,
            body.error,
            extra=extra,
        )


def _stalled(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _runs.info(
        "run %s: node %s stalled at turn %d", run_id, body.node_id, body.iteration, extra=extra
    )


def _verdict(run_id: str, body: Any, extra: dict[str, Any]) -> None:
    _judge.debug(
        "run %s: node %s turn %d: %s [%s]%s",
        run_id,
        body.node_id,
        body.iteration,
        body.action.upper(),
        body.level,
        f": {body.feedback}" if body.feedback else "",
        extra={**extra, "verdict": body.action, "level": body.level},
    )


#: How each logged event type is logged; a batch with none of them logs nothing.
_LOGGED: dict[type, Callable[[str, Any, dict[str, Any]], None]] = {
    RunStarted: _started,
    RunForked: _forked,
    RunFinished: _finished,
    RunPaused: _paused,
    RunResumed: _resumed,
    ApprovalGranted: _approved,
    ApprovalRejected: _rejected,
    RunCancelled: _cancelled,
    NodeFailed: _failed,
    StallDetected: _stalled,
    Verdict: _verdict,
}


def _log(run_id: str, event: EventBody) -> None:
    write = _LOGGED.get(type(event))
    if write is not None:
        write(run_id, event, {"run_id": run_id, "node_id": getattr(event, "node_id", None)})
