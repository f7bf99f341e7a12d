"""Where a resumed run's walk picks up: the nodes it starts again, from its folded state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events._catalogue import InputInjected, MemoryWritten, RunResumed
from ..events._state import RunState
from ..llm._verdict import waits_for_user
from ..spec._model import GraphSpec
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
    fan-out is taken up by ``join``. Input given to a run stopped after a node asked for
    input and before its pause was recorded answers that node (``input_for``)."""
    state = log.state
    pending = list(state.pending)
    unfinished = set(state.running)
    gates_due = state.gates_due  # read before RunResumed clears it
    log.stage(RunResumed(input_for=_asked(state, join.graph) if resume_input else None))
    for node_id in state.running:
        _take_back_appends(log, state, join.reducers, node_id)
    if resume_input:
        log.stage(InputInjected(data=dict(resume_input)))
    pauses.resume(pending, unfinished, state, fork=gates_due)
    return join.resume(pending), unfinished


def _asked(state: RunState, graph: GraphSpec) -> str | None:
    """The unfinished node whose last turn's RETRY made it wait for its user, when nothing
    answered it and its pause for input is not recorded (the run was interrupted, or forked,
    in between): the run's resume answers it as it would answer that pause."""
    specs = graph.node_map()
    for node_id in state.running:
        visit, spec = state.visits.get(node_id), specs.get(node_id)
        if visit is None or spec is None or visit.paused_for_input:
            continue
        verdict, turn = visit.last_verdict, visit.last_turn
        if verdict is None or turn is None or visit.answered_since_verdict:
            continue
        if waits_for_user(spec.client_facing, verdict, turn):
            return node_id
    return None


def _take_back_appends(
    log: RunLog, state: RunState, reducers: Mapping[str, str], node_id: str
) -> None:
    """Take the items a cancel's flush appended for ``node_id``, which runs again, back out
    of their lists: its completion appends its value once, as a run never cancelled does.

    What a node that has not finished wrote since it last started is that flush (a node
    writes memory when it completes); ``replace`` and ``merge`` writes stay, since the
    completion's own writes supersede them, and the node may read them meanwhile.
    """
    visit = state.visits.get(node_id)
    if visit is None:
        return
    for key, item in list(visit.written.items()):
        held = state.memory.get(key)
        if reducers.get(key) != "append" or not isinstance(held, list):
            continue
        at = next((i for i in range(len(held) - 1, -1, -1) if held[i] == item), None)
        if at is not None:
            kept = held[:at] + held[at + 1 :]
            log.stage(MemoryWritten(key=key, value=kept, op="replace", node_id=node_id))
