"""Control of runs not live here (paused, crashed, or live in another process): the
control event appended to their log, with a cancel's flush of the running nodes' partial
outputs and the resume point it names.

A run's end is observed (counted by the metrics, logged) by the process that executes it:
a cancel appended here to a run another process executes is observed there, when that
process stops the run (it reads the cancel back: :func:`cancellation`), not here; a cancel
of a run that nothing executes (paused, waiting for a worker, its owner crashed) is
observed here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio

from eventstore import ConcurrencyError, EventBody

from .._errors import RunChangedError, RunStateError
from .._result import FINAL
from .._run_logs import RunLogs
from ..engine._runlog import CommitObserver
from ..events._catalogue import (
    InputInjected,
    MemoryWritten,
    PauseRequested,
    RunCancelled,
    RunPaused,
)
from ..events._state import RunState
from ..spec._load import graph_from_dict
from ._live_runs import LiveRuns

__all__ = ["ControlElsewhere", "cancellation", "first", "partial_outputs"]


class ControlElsewhere:
    """Appends cancel, pause and input events to the logs of runs not live here; ``owner``:
    the worker id this runtime claims runs as (None: its store records no ownership);
    ``graph_seen``: told the graph id of a run whose cancel is observed here."""

    __slots__ = ("graph_seen", "live", "logs", "owner")

    def __init__(
        self,
        logs: RunLogs,
        live: LiveRuns,
        *,
        owner: str | None,
        graph_seen: Callable[[str, object], None] | None = None,
    ) -> None:
        self.logs = logs
        self.live = live
        self.owner = owner
        self.graph_seen = graph_seen

    async def __call__(
        self,
        run_id: str,
        action: Literal["cancel", "pause", "inject"],
        *,
        reason: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        """Append a control event to a run not live here (paused, crashed, or live in
        another process, which sees it within its control interval). Retries while the
        owner appends meanwhile (each try re-reads the state)."""
        for _ in range(50):
            # Whether another process executes the run is read before its state: nothing is
            # read between the state and the append, which a busy run would move meanwhile.
            elsewhere = action == "cancel" and await self._executed_elsewhere(run_id)
            state = await self.logs.get_state(run_id)
            body: EventBody
            match action:
                case "cancel":
                    if state.status in FINAL or state.status == "cancelled":
                        raise RunChangedError(run_id, state.status, "nothing to cancel")
                    body = RunCancelled(node_id=first(state.pending), reason=reason)
                    bodies = [*partial_outputs(state), body]
                    elsewhere = elsewhere and state.status == "running"
                case "pause":
                    if state.status in (*FINAL, "cancelled", "paused"):
                        raise RunChangedError(run_id, state.status, "only a running run can pause")
                    if state.status != "running":
                        raise RunStateError(run_id, state.status, "only a running run can pause")
                    if state.pause_requested:
                        return  # asked for already: its owner pauses it once
                    # A run its owner executes pauses at the owner's next node boundary;
                    # one nobody executes (waiting for a worker) pauses now.
                    body = (
                        PauseRequested()
                        if await self._owned(run_id)
                        else RunPaused(reason="user", node_id=first(state.pending))
                    )
                case "inject":
                    if state.status in FINAL:
                        raise RunChangedError(
                            run_id, state.status, "cannot inject input into a finished run"
                        )
                    body = InputInjected(data=data or {})
            self.live.drop(run_id)
            try:
                log = self.logs.reopen(run_id, state.last_seq)
                if action == "cancel" and elsewhere:  # its executor's process observes it
                    log.observers = (_Unended(log.observers),)
                elif action == "cancel" and self.graph_seen is not None and state.graph:
                    self.graph_seen(run_id, state.graph.get("id"))  # its end counts here
                # The log answers it whatever cancels the caller (RunLog.append): a
                # control event committed reaches the commit hooks.
                await log.append(bodies if action == "cancel" else [body])
                return
            except ConcurrencyError:
                if type(body) is PauseRequested and await self._request_at_head(run_id, body):
                    return
                await anyio.sleep(0.01)  # the owner appended meanwhile: read again
        raise RunStateError(run_id, "running", f"could not {action}: the run kept moving")

    async def _request_at_head(self, run_id: str, body: PauseRequested) -> bool:
        """A pause request that met its owner's appends goes again at the run's head,
        while the run is running and claimed: one row read a try, not a fold, so a run
        whose nodes append fast still gets it (its owner takes it in, _foreign.py)."""
        store = self.logs.store
        for _ in range(20):
            info = None if store is None else await store.get_run(run_id)
            if info is None or info.status != "running" or info.owner is None:
                return False  # the caller reads the state again
            try:
                await self.logs.reopen(run_id, info.last_seq).append([body])
                return True
            except ConcurrencyError:
                continue
        return False

    async def _owned(self, run_id: str) -> bool:
        """Whether a live claim (this runtime's or another's) holds ``run_id``."""
        store = self.logs.store
        if self.owner is None or store is None:
            return False
        info = await store.get_run(run_id)
        return info is not None and info.owner is not None

    async def _executed_elsewhere(self, run_id: str) -> bool:
        """Whether another process's live claim holds ``run_id`` (its executor runs there)."""
        store = self.logs.store
        if self.owner is None or store is None:
            return False
        info = await store.get_run(run_id)
        return info is not None and info.owner not in (None, self.owner)


class _Unended:
    """A cancel's observers where the run's executor runs in another process: they are told
    of the batch without its ``run.cancelled``, which that process observes."""

    __slots__ = ("observers",)

    def __init__(self, observers: Sequence[CommitObserver]) -> None:
        self.observers = observers

    def __call__(self, run_id: str, bodies: Sequence[EventBody], seconds: float | None) -> None:
        kept = [body for body in bodies if type(body) is not RunCancelled]
        for observer in self.observers:
            observer(run_id, kept, seconds)


async def cancellation(logs: RunLogs, run_id: str, state: RunState) -> RunCancelled | None:
    """The ``run.cancelled`` that left ``run_id`` in ``state`` (cancelled), read back from
    the end of its log: what a process whose executor of the run another process's cancel
    stopped tells its observers (see the module docstring); None if there is none."""
    to_seq = state.last_seq
    while to_seq > 0:
        from_seq = max(1, to_seq - 31)
        events = await logs.read_events(run_id, from_seq=from_seq, to_seq=to_seq)
        for event in reversed(events):
            if type(event.body) is RunCancelled:
                return event.body
        to_seq = from_seq - 1
    return None


def partial_outputs(state: RunState) -> list[EventBody]:
    """The memory writes that flush the partial outputs of the nodes running in
    ``state`` (outside a fan-out), as the executor's own cancel does: a cancel from any
    process keeps the same work."""
    if state.fanout is not None or state.graph is None:
        return []
    reducers = {key.name: key.reducer for key in graph_from_dict(state.graph, recorded=True).memory}
    return [
        MemoryWritten(key=key, value=value, op=reducers.get(key, "replace"), node_id=node_id)
        for node_id in state.running
        for key, value in state.outputs.get(node_id, {}).items()
    ]


def first(items: Sequence[str]) -> str | None:
    return items[0] if items else None
