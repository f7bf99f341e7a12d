"""A new run's start, taken in the task that launches it.

``Runtime.start`` tells a new run's executor ``StartRun`` while the executor is idle (it
was just spawned), so the actor system hands it the message synchronously
(``Actor.receive_now``): the run's first step (``run.started`` and its entry node's start)
is recorded there, as :meth:`StepNow.take <runtime.engine._step_now.StepNow.take>` records
a common step, with no task of the executor's own for it. The entry node runs once that
step is committed (StartOnCommit), and ``Runtime.start`` returns then, as before. A start
that would wait for anything (commit hooks, a pause at the entry node) is declined before
anything is recorded, and goes through the executor's ``receive``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actors import Actor

from ..events._catalogue import RunStarted
from ..spec._model import GraphSpec, graph_hash, shared_graph_dict
from ._messages import CommitFailed
from ._step_now import StepNow

__all__ = ["run_started", "start_now"]


def run_started(graph: GraphSpec, input: dict[str, Any]) -> RunStarted:
    """The event beginning a new run of ``graph`` with ``input``."""
    return RunStarted(
        graph=shared_graph_dict(graph),
        graph_hash=graph_hash(graph),
        entry=graph.entry_node,
        goal=None if graph.goal is None else msgspec.to_builtins(graph.goal),
        input=dict(input),
    )


def start_now(executor: Actor, steps: StepNow, input: dict[str, Any]) -> bool:
    """Record a new run's start here; False, having recorded nothing, where the executor's
    ``receive`` is to. Never raises: a failure after the start began goes to the executor
    as CommitFailed, as a failed commit does."""
    log, graph = steps.log, steps.graph
    state = log.state
    entry = graph.entry_node
    if (
        log.hooks
        or log.failed is not None
        or log.rebase is not None
        or log.last_seq != 0
        or state.pause_requested
        or state.steps >= graph.max_steps
        or entry in state.rejected
        or entry in steps.pauses.pause_nodes
    ):
        return False
    try:
        log.stage(run_started(graph, input))
        steps.start_on_commit(executor, entry)
    except Exception as exc:
        executor.ref.tell_nowait(CommitFailed(error=exc))
    return True
