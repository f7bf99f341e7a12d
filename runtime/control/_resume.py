"""Continuing a run from its log in this process: the one step under ``resume``,
recovery, a settled conflict and a gate's decision; and a fork's copy continued here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from actors import finish

from .._errors import RunChangedError, RunStateError
from .._fork import copy_prefix
from .._handle import RunHandle
from .._node_factory import NodeFactory
from .._result import RunOutcome
from ..engine._runlog import RunLog
from ..spec._model import GraphSpec
from ._gates import check_resumable
from ._launch import launch
from ._owned_outcome import OwnedOutcome
from ._run_control import RunControl

if TYPE_CHECKING:
    from ..observe._metrics import RuntimeMetrics

__all__ = ["fork_here", "resume_from_log"]


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
        state, graph, snapshot = await logs.read_resumable(run_id)
    except RunStateError as exc:
        if at_seq is None:
            raise
        raise RunChangedError(run_id, exc.status, moved) from None  # it finished since
    if at_seq is not None and state.last_seq != at_seq:
        raise RunChangedError(run_id, state.status, moved)
    if gated:
        check_resumable(run_id, state)
    nodes.check(graph)
    log = logs.reopen(run_id, state.last_seq, snapshot)
    first: OwnedOutcome | None = None
    if outcome is None and at_seq is None and logs.store is not None:
        # An owned outcome (one of a store's run), made here to wait for its first step;
        # else launch makes it, with its hooks.
        outcome = control.new_outcome(run_id, None)
        if isinstance(outcome, OwnedOutcome):
            first = outcome
            _first_step_durable(log)
    handle = launch(
        control,
        nodes,
        metrics,
        run_id,
        graph,
        log,
        resume_from=state,
        resume_input=dict(input or {}) or None,
        outcome=outcome,
        acted=at_seq is not None,
    )
    if first is not None:
        # A resume returns once its first step is in the store: one whose first append
        # met another writer's events did nothing and raises what happened (settled
        # from the log: RunChangedError "already cancelled", say), never a stale handle.
        await first.answered()
        if not first.acted and first.done:
            await first.wait()  # raises its error once the claim here is given up
    return handle


async def fork_here(
    control: RunControl,
    check: Callable[[GraphSpec], None],
    run_id: str,
    at_seq: int,
    resume: Callable[[str], Awaitable[RunHandle]],
) -> RunHandle:
    """``Runtime.fork``: copy ``run_id``'s first ``at_seq`` events into a new run
    (``copy_prefix``, claimed here with its copy) and continue it here (``resume``, given
    the new id). Carried through to the launch whatever cancels the caller meanwhile (an
    anyio scope, or asyncio's ``wait_for``), the cancellation raised after it: a copy
    written and not launched would be left running, claimed here, with nothing to run it
    (and after the runtime closes, running with no owner). A copy whose launch the
    runtime's closing refused is ended as the close ends the runs live here (_closing.py)."""

    async def fork() -> RunHandle:
        with control.closing.acting():  # closing waits for its launch, or refuses it
            new_id = await copy_prefix(
                control.logs, run_id, at_seq, ownership=control.ownership, check=check
            )
            try:
                return await resume(new_id)
            except RunStateError as exc:
                if not control.closing.refused(exc):
                    raise
                raise await control.closing.unlaunched(new_id) from None

    return await finish(fork())


def _first_step_durable(log: RunLog) -> None:
    """The resume's first step (``run.resumed`` and the nodes it starts) is committed at
    once whatever the graph's durability, as a start's is; write-behind after it."""
    write_behind = log.write_behind
    log.write_behind = 1

    def restore(_run_id: str, _bodies: object, _elapsed: float | None) -> None:
        log.write_behind = write_behind
        log.observers = tuple(o for o in log.observers if o is not restore)

    log.observers = (*log.observers, restore)
