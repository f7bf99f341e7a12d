"""Launching a run's executor: the one step ``start``, ``resume`` and an approval share;
and a new run's start (``Runtime.start`` after its checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors import Waiter, new_waiter

from .._errors import RunStateError
from .._handle import RunHandle
from .._node_factory import NodeFactory
from .._result import RunOutcome
from ..engine._executor import ExecutorActor
from ..engine._messages import StartRun
from ..engine._runlog import RunLog
from ..engine._start_on_commit import FirstCommit
from ..events._state import RunState
from ..spec._model import GraphSpec
from ._own_run import NODE_OF_RUN
from ._owned_outcome import OwnedOutcome
from ._ownership import new_run_id
from ._run_control import RunControl

if TYPE_CHECKING:
    from ..observe._metrics import RuntimeMetrics  # prometheus_client: loaded by who makes metrics

__all__ = ["launch", "start_named", "start_run"]


def launch(
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
    """Spawn the run's executor in ``control``'s actor system and tell it to start (here:
    a new actor's mailbox has room, so nothing is waited for).
    ``started`` (from ``Runtime.start``) is set once the run stopped or met a conflict, in
    case its first commit never came. A resume whose first append meets another writer's
    events fails with RunChangedError (it did nothing), unless ``acted`` (something was
    recorded for it already: a gate's decision). Raises RunStateError, launching
    nothing, once the runtime's closing began (_closing.py)."""
    control.closing.check()  # nothing awaited from here to the spawn: closing lists it
    hooks = None
    if outcome is None:
        hooks = control.new_hooks(run_id, started)
        outcome = hooks.outcome
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
        metrics.run_launched(run_id, graph, resume_from)
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
    # Started by a node of another run: the executor's tasks are not that run's.
    token = NODE_OF_RUN.set(None) if NODE_OF_RUN.get() is not None else None
    try:
        ref = control.live.system.spawn(executor, name=f"run:{run_id}")
        control.add_live(run_id, ref, outcome, log, hooks)
        ref.tell_nowait(StartRun())
    except BaseException:
        if metrics is not None:
            metrics.run_stopped(run_id)  # it does not execute here (the system stopped)
        raise
    finally:
        if token is not None:
            NODE_OF_RUN.reset(token)
    since = 0 if resume_from is None else resume_from.last_seq
    return RunHandle(run_id, outcome, control.logs, since)


async def start_named(
    control: RunControl,
    nodes: NodeFactory,
    metrics: RuntimeMetrics | None,
    graph: GraphSpec,
    input: dict[str, Any],
    run_id: str | None,
) -> RunHandle:
    """:func:`start_run` of a run whose id the caller names, one at a time (a client's
    retries, sent at once): the next finds it running here (RunStateError), or in the
    store once it ended (refused as any start of a stored id is)."""
    assert run_id is not None
    async with control.acting_on(run_id):
        if control.live.running_here(run_id):
            raise RunStateError(run_id, "running", "it is already running in this runtime")
        return await start_run(control, nodes, metrics, graph, input, run_id)


async def start_run(
    control: RunControl,
    nodes: NodeFactory,
    metrics: RuntimeMetrics | None,
    graph: GraphSpec,
    input: dict[str, Any],
    run_id: str | None,
) -> RunHandle:
    """Start a new run of a checked ``graph`` (``Runtime.start``): wait for the store's
    room first, claim it, launch it; return its handle once its start is committed.
    Raises RunStateError, having made nothing of the run, once the runtime's closing
    began (_closing.py); raises what refused the run's first batch before it reached the
    store (a store's ValueError for text it cannot hold, a StoreError), nothing of the
    run written and its claim given up."""
    control.closing.check()
    room = control.logs.room  # the store, if it has room to wait for
    if room is not None and not room.has_room():
        # Backpressure before anything of the run is made: a start waiting for the writer
        # holds its caller's coroutine and one future, not a run and its executor's task.
        # Awaited only when the writer is full (no coroutines a start otherwise).
        await room.wait_for_room()
        if run_id is not None and control.live.running_here(run_id):
            raise RunStateError(run_id, "running", "it is already running in this runtime")
    ownership = control.ownership
    with control.closing.acting():  # closing waits for its launch, or refuses it
        run_id = await _claim(control, graph, run_id)
        started = new_waiter()  # a bare one-shot waiter: an anyio.Event costs a deque a run
        first = FirstCommit(started)
        log = control.logs.create(run_id, observers=(first,))
        try:
            handle = launch(
                control, nodes, metrics, run_id, graph, log, input=input, started=started
            )
            live = control.live.get(run_id)  # as launched: its start is still to be taken
            outcome = None if live is None else live.outcome
        except BaseException:  # (closing began while it was claimed): nothing of it runs
            _answered(control, run_id, log, first)
            if ownership is not None:
                await ownership.release(run_id)
            raise
    try:
        await started
    finally:
        _answered(control, run_id, log, first)
    if outcome is not None and outcome.error is not None and log.last_seq == 0:
        # Its first batch was refused before it reached the store (bad input a store's
        # checks refuse, a closed store): nothing of the run exists, so no handle either.
        # The outcome raises it once the run's claim is given up (OwnedOutcome).
        await outcome.wait()
    return handle


async def _claim(control: RunControl, graph: GraphSpec, run_id: str | None) -> str:
    """Claim the run a start creates, where the store records ownership; its id."""
    ownership = control.ownership
    if ownership is not None:
        if run_id is None and graph.durability == "sync":
            # The common start: its claim rides with its first append, nothing awaited.
            claimed = ownership.claim_with_first_append()
            if claimed is not None:
                return claimed
        run_id = run_id or new_run_id()
        held = run_id in ownership.claims
        try:
            await ownership.claim(run_id)
        except BaseException:
            # Cancelled once asked, the claim is held here all the same (claim): no
            # run of it exists, so it is given up, not renewed for the runtime's life.
            if not held:
                await ownership.release(run_id)
            raise
    return run_id or new_run_id()


def _answered(control: RunControl, run_id: str, log: RunLog, first: FirstCommit) -> None:
    """A start's wait for its run's first commit is over: the run's later commits need
    not call ``first``, nor the run hold it and its waiter."""
    control.starting.pop(run_id, None)
    observers = log.observers
    if observers and observers[-1] is first:  # the last, as logs.create adds it
        rest = observers[:-1]
        shared = control.logs.observers  # the runtime's own: one tuple, not one a run
        log.observers = shared if rest == shared else rest
    else:
        log.observers = tuple(o for o in observers if o is not first)
