"""Where a resumed run's walk picks up: the nodes it starts again, from its folded state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events._catalogue import InputInjected, RunResumed
from ._join import FanOutJoin
from ._pause_points import PausePoints
from ._runlog import RunLog

__all__ = ["resume_walk"]


def resume_walk(
    log: RunLog, pauses: PausePoints, join: FanOutJoin, resume_input: Mapping[str, Any] | None
) -> tuple[list[tuple[str, str | None]], set[str]]:
    """Stage the resume (and its input) and return the (node, branch) starts it makes, with
    the nodes that started and did not finish: they run again, as the same visit. The
    pause points let the nodes due through (or hold a closed gate again), and an open
    fan-out is taken up by ``join``."""
    state = log.state
    pending = list(state.pending)
    unfinished = set(state.running)
    gates_due = state.gates_due  # read before RunResumed clears it
    log.stage(RunResumed())
    if resume_input:
        log.stage(InputInjected(data=dict(resume_input)))
    pauses.resume(pending, unfinished, state, fork=gates_due)
    return join.resume(pending), unfinished
