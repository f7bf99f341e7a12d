"""Continuing a run from its log in this process: the one step under ``resume``,
recovery, a settled conflict and a gate's decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import RunChangedError, RunStateError
from .._handle import RunHandle
from .._node_factory import NodeFactory
from .._result import RunOutcome
from ._gates import check_resumable
from ._launch import launch
from ._run_control import RunControl

if TYPE_CHECKING:
    from ..observe._metrics import RuntimeMetrics

__all__ = ["resume_from_log"]


async def resume_from_log(
    control: RunControl,
    nodes: NodeFactory,
    metrics: RuntimeMetrics | None,
    run_id: str,
    input: Mapping[str, Any] | None,
    outcome: RunOutcome | None,
    gated: bool,
    at_seq: int | None,
) -> RunHandle:
    """Launch ``run_id``'s executor from its log (state and graph as the fold has them).

    ``gated``: a run waiting at a gate is refused (a fork's copy waits there again
    instead). ``at_seq`` (a gate's decision): the run goes on only from that event, so a
    control that moved it since wins (RunChangedError). Raises RunNotFoundError,
    RunStateError, SpecErrors for a graph this runtime cannot run."""
    logs = control.logs
    moved = "another writer moved it after the decision"
    try:
        state, graph = await logs.read_resumable(run_id)
    except RunStateError as exc:
        if at_seq is None:
            raise
        raise RunChangedError(run_id, exc.status, moved) from None  # it finished since
    if at_seq is not None and state.last_seq != at_seq:
        raise RunChangedError(run_id, state.status, moved)
    if gated:
        check_resumable(run_id, state)
    nodes.check(graph)
    return await launch(
        control,
        nodes,
        metrics,
        run_id,
        graph,
        logs.reopen(run_id, state.last_seq),
        resume_from=state,
        resume_input=dict(input or {}) or None,
        outcome=outcome,
        acted=at_seq is not None,
    )
