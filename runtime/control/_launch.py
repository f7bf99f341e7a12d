"""Launching a run's executor: the one step ``start``, ``resume`` and an approval share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors import Waiter

from .._handle import RunHandle
from .._node_factory import NodeFactory
from .._result import RunOutcome
from ..engine._executor import ExecutorActor
from ..engine._messages import StartRun
from ..engine._runlog import RunLog
from ..events._state import RunState
from ..spec._model import GraphSpec
from ._live_runs import LiveRun
from ._owned_outcome import OwnedOutcome
from ._run_control import RunControl

if TYPE_CHECKING:
    from ..observe._metrics import RuntimeMetrics  # prometheus_client: loaded by who makes metrics

__all__ = ["launch"]


async def launch(
    control: RunControl,
    nodes: NodeFactory,
    metrics: RuntimeMetrics | None,
    run_id: str,
    graph: GraphSpec,
    log: RunLog,
    *,
    input: dict[str, Any] | None = None,
    resume_from: RunState | None = None,
    resume_input: dict[str, Any] | None = None,
    outcome: RunOutcome | None = None,
    started: Waiter | None = None,
    acted: bool = False,
) -> RunHandle:
    """Spawn the run's executor in ``control``'s actor system and tell it to start.
    ``started`` (from ``Runtime.start``) is set once the run stopped or met a conflict, in
    case its first commit never came. A resume whose first append meets another writer's
    events fails with RunChangedError (it did nothing), unless ``acted`` (something was
    recorded for it already: a gate's decision)."""
    if outcome is None:
        outcome = control.new_outcome(run_id, started)
    elif isinstance(outcome, OwnedOutcome):
        outcome.holding = False
    if isinstance(outcome, OwnedOutcome) and not outcome.acted:
        if resume_from is None or acted:
            # A start (its first append conflicts with nobody), or the continuation of a
            # gate's decision (recorded: whatever follows answers it).
            outcome.acted = True
        else:
            log.observers = (*log.observers, outcome.committed)
    if metrics is not None:
        metrics.run_launched(run_id, graph)
    executor = ExecutorActor(
        run_id=run_id,
        graph=graph,
        log=log,
        node_factory=nodes,
        provider=nodes.provider,
        outcome=outcome,
        input=input,
        resume_from=resume_from,
        resume_input=resume_input,
        score_goal=nodes.score_goal,
    )
    ref = control.live.system.spawn(executor, name=f"run:{run_id}")
    control.add_live(run_id, LiveRun(ref, outcome, log))
    await ref.tell(StartRun())
    since = 0 if resume_from is None else resume_from.last_seq
    return RunHandle(run_id, outcome, control.logs, since)
