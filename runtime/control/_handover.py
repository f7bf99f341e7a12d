"""Handing runs to any worker: a start or a resumption recorded for a runtime with
``recovery`` on the same store to claim and execute (see :meth:`Runtime.submit`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import msgspec

from actors import settle
from eventstore import ConcurrencyError, EventBody

from .._errors import RunStateError
from ..events._catalogue import InputInjected, RunResumed, RunStarted
from ..spec._model import GraphSpec, graph_hash, shared_graph_dict
from ._gates import check_resumable
from ._run_control import RunControl

__all__ = ["submit", "submit_resume"]


async def submit(
    control: RunControl, graph: GraphSpec, input: dict[str, Any], run_id: str | None
) -> str:
    """Record the start of a run for any worker (see :meth:`Runtime.submit`)."""
    control.closing.check()
    store = control.logs.store
    if store is None or control.ownership is None:
        raise RunStateError("-", "no store", "submit needs a store that records ownership")
    run_id = run_id or uuid.uuid4().hex
    started = RunStarted(
        graph=shared_graph_dict(graph),
        graph_hash=graph_hash(graph),
        entry=graph.entry_node,
        goal=None if graph.goal is None else msgspec.to_builtins(graph.goal),
        input=input,
    )
    began = time.perf_counter()
    # Answered whatever cancels the caller: a run submitted is counted (the anyio shield
    # holds a scope's cancellation; settle, asyncio's own, raised once counted).
    with control.closing.acting(), anyio.CancelScope(shield=True):  # closing waits for it
        appending, cancelled = await settle(store.append(run_id, [started], expected_seq=0))
    appending.result()
    # Counted here, where it started (the worker that claims it counts a resume).
    for observer in control.logs.observers:
        observer(run_id, [started], time.perf_counter() - began)
    if cancelled is not None:
        raise cancelled
    return run_id


async def submit_resume(control: RunControl, run_id: str, input: Mapping[str, Any] | None) -> None:
    """Record a paused run's resumption for any worker (see
    :meth:`Runtime.submit_resume`)."""
    control.closing.check()
    store = control.logs.store
    if store is None or control.ownership is None:
        raise RunStateError(run_id, "-", "submit_resume needs a store that records ownership")
    for _ in range(50):
        state = await control.logs.get_state(run_id)
        if state.status != "paused":
            raise RunStateError(run_id, state.status, "only a paused run can be handed on")
        check_resumable(run_id, state)  # a gate opens only by an approval
        bodies: list[EventBody] = [InputInjected(data=dict(input))] if input else []
        bodies.append(RunResumed(note="handed to any worker"))
        began = time.perf_counter()
        try:
            with control.closing.acting():  # refused once closing began, which waits for it
                await store.append(run_id, bodies, expected_seq=state.last_seq)
        except ConcurrencyError:
            await anyio.sleep(0.01)  # appended to meanwhile: read again
            continue
        if input:
            # Its input is counted here, where it was given; its resumption where a worker
            # executes it (that worker's own run.resumed), as a run cancelled elsewhere is.
            for observer in control.logs.observers:
                observer(run_id, bodies[:1], time.perf_counter() - began)
        return
    raise RunStateError(run_id, "paused", "could not hand it on: the run kept moving")
