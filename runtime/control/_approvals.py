"""Approvals: the only way through a pause node's gate, the same from every front.

A run that reaches a pause node pauses before it (reason ``hitl``): it waits at the gate.
Only an ``approval.granted`` event opens it (:meth:`Runtime.approve`, which ``magistrate
approve``, ``POST /api/runs/{run}/approve`` and the dashboard call); an
``approval.rejected`` closes it for good (:meth:`Runtime.reject`). A plain resume of a run
waiting at a gate is refused; a resume of a run cancelled at a gate waits at the gate
again. An approval is one append, made with the seq of the pause it answers, so a
control that moved the run meanwhile (a cancel) wins and the approval is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from actors import finish
from eventstore import ConcurrencyError, EventBody, RunOwnedError

from .._errors import RunChangedError, RunStateError, SpecErrors
from .._handle import RunHandle
from .._node_factory import NodeFactory
from .._run_logs import RunLogs
from ..events._catalogue import ApprovalGranted, ApprovalRejected, RunCancelled
from ..events._state import RunState
from ..spec._model import GraphSpec
from ._gates import check_resumable, gate_of, missing_keys
from ._run_control import RunControl

__all__ = ["check_resumable", "decide_gate", "grant", "reject"]

#: Records a gate's decision on the run's state and graph; returns whether the run goes on.
Record = Callable[[RunLogs, str, RunState, GraphSpec], Awaitable[bool]]
#: Continues a run from its log in this process, if its log ends at the given seq (else
#: RunChangedError: another writer moved it).
Resume = Callable[[str, int], Awaitable[RunHandle]]


async def grant(
    logs: RunLogs,
    run_id: str,
    state: RunState,
    graph: GraphSpec,
    *,
    input: Mapping[str, Any],
    by: str,
    expected_seq: int | None = None,
) -> bool:
    """Record the approval of the gate ``state`` waits at: one append, expected at the
    pause's seq. Raises RunStateError (nothing recorded) when the run waits at no gate,
    when the gated node would still lack input keys (named), when another writer moved
    the run since ``state`` (what happened is in the message), or, as RunChangedError,
    when its log does not end at ``expected_seq`` (the approver saw it before, or named a
    seq it never reached). Returns True: the run goes on."""
    seen(run_id, state, expected_seq)
    node_id = gate_of(run_id, state)
    missing = missing_keys(graph, node_id, state, input)
    if missing:
        raise RunStateError(
            run_id,
            "paused",
            f"the gate {node_id!r} stays closed: its node needs {', '.join(missing)}, which "
            "neither memory nor the approval's input holds",
        )
    await _append(logs, run_id, state, [ApprovalGranted(node_id=node_id, by=by, input=dict(input))])
    return True


async def reject(
    logs: RunLogs,
    run_id: str,
    state: RunState,
    graph: GraphSpec,
    *,
    by: str,
    reason: str,
    expected_seq: int | None = None,
) -> bool:
    """Record the rejection of the gate ``state`` waits at (one append, expected at the
    pause's seq); return whether the run goes on (the node has ``on_failure`` edges, which
    then fire) or ended cancelled. Raises RunStateError as :func:`grant` does."""
    seen(run_id, state, expected_seq)
    node_id = gate_of(run_id, state)
    goes_on = any(e.condition == "on_failure" for _, e in graph.node_edges(node_id).on_failure)
    bodies: list[EventBody] = [ApprovalRejected(node_id=node_id, by=by, reason=reason)]
    if not goes_on:
        why = f": {reason}" if reason else ""
        bodies.append(RunCancelled(node_id=node_id, reason=f"rejected by {by}{why}"))
    await _append(logs, run_id, state, bodies)
    return goes_on


def seen(run_id: str, state: RunState, expected_seq: int | None) -> None:
    """Refuse a decision made on a page other than the run's (RunChangedError): its log
    ends past ``expected_seq``, the run's last seq as the one deciding saw it (a cancel, a
    resume with input, another decision came since: what they would decide on is not what
    they saw), or before it (a seq the log never reached: not this run's page). None: no
    check."""
    if expected_seq is None or state.last_seq == expected_seq:
        return
    if state.last_seq > expected_seq:
        what = f"its log moved on since seq {expected_seq} (it is at seq {state.last_seq} now)"
    else:
        what = f"expected seq {expected_seq}, but its log ends at seq {state.last_seq}"
    why = f"{what}: look at it again before deciding"
    raise RunChangedError(run_id, state.status, why, already=False)


async def _append(logs: RunLogs, run_id: str, state: RunState, bodies: list[EventBody]) -> None:
    log = logs.reopen(run_id, state.last_seq)
    try:
        await log.append(bodies)
    except ConcurrencyError:
        now = await logs.get_state(run_id)
        raise RunChangedError(
            run_id, now.status, "another writer moved it after the pause this answers"
        ) from None


async def decide_gate(
    control: RunControl, nodes: NodeFactory, run_id: str, record: Record, resume: Resume
) -> RunHandle | None:
    """Record a gate's decision with ``record``, then continue the run here (``resume``)
    if it goes on and this runtime can execute its graph, claimed before the append so no
    worker takes it meanwhile. None: the decision ended the run, or it is left to its
    owner or a worker. One action on the run at a time here: a second decision, or a
    resume, waits for this one and then finds the run as it left it."""
    async with control.acting_on(run_id):  # after a resume or decision under way
        return await _decide(control, nodes, run_id, record, resume)


async def _decide(
    control: RunControl, nodes: NodeFactory, run_id: str, record: Record, resume: Resume
) -> RunHandle | None:
    try:
        state, graph, _snapshot = await control.logs.read_resumable(run_id)
    except RunStateError as exc:  # a finished run
        raise RunChangedError(run_id, exc.status, "it waits at no gate") from None
    try:
        nodes.check(graph)
        here = not control.live.running_here(run_id)
    except SpecErrors:
        here = False
    ownership = control.ownership
    claimed = here and ownership is not None and run_id not in ownership.claims
    try:
        if claimed and ownership is not None:
            try:
                await ownership.claim(run_id)
            except RunOwnedError:
                here = claimed = False
        if control.graph_seen is not None:
            control.graph_seen(run_id, graph.id)  # a rejection that ends the run counts here
        # Finished whatever cancels the caller: a decision recorded and its run not
        # launched would leave the run running with nobody to run it.
        handle = await finish(_record(control, run_id, state, graph, record, here, resume))
    except BaseException:  # (a claim not held here: release does nothing)
        if claimed and ownership is not None and not control.live.running_here(run_id):
            await ownership.release(run_id)  # nothing runs here (a cancelled wait: it goes on)
        raise
    if handle is None and claimed and ownership is not None:
        await ownership.release(run_id)
    return handle


async def _record(
    control: RunControl,
    run_id: str,
    state: RunState,
    graph: GraphSpec,
    record: Record,
    here: bool,
    resume: Resume,
) -> RunHandle | None:
    """Record the decision; then continue the run here if it goes on and ``here`` (a
    run the runtime's closing did not let go on is ended as the close ends the runs live
    here, _closing.py)."""
    if await record(control.logs, run_id, state, graph) and here:
        # Goes on from the decision only: a control after it (a cancel) wins.
        try:
            return await resume(run_id, state.last_seq + 1)
        except RunStateError as exc:
            if not control.closing.refused(exc):
                raise
            raise await control.closing.unlaunched(run_id) from None
    return None
