"""How the executor ends a run's stretch: paused at a node boundary, cancelled, finished
(with its goal scored), or failed by an unexpected error; then the result it reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from actors import ActorRef
from eventstore import EventBody, StoreError

from ._events import MemoryWritten, RunCancelled, RunFinished, RunPaused
from ._goals import GoalScorer
from ._result import RunOutcome, RunStatus, result_of
from ._runlog import RunLog
from ._spec import GraphSpec
from ._state import RunState, disown

__all__ = ["RunEnding"]


class RunEnding:
    """The part of the executor that pauses, cancels and finishes a run and reports it."""

    graph: GraphSpec
    log: RunLog
    state: RunState
    outcome: RunOutcome
    run_id: str
    score_goal: GoalScorer | None
    reducers: dict[str, str]
    nodes: dict[str, ActorRef]
    node_refs: dict[str, ActorRef]
    running: dict[str, tuple[int, str | None]]
    retry_timers: int
    deferred: list[tuple[str, str | None, str]]
    deciding: dict[str, anyio.CancelScope]
    stopping: bool

    if TYPE_CHECKING:

        def emit(self, body: EventBody) -> None: ...

        async def commit(self, *, boundary: bool = True) -> None: ...

    async def _maybe_pause(self) -> None:
        if not self.deferred or self.running or self.retry_timers or self.stopping:
            return
        node_id, _branch, reason = self.deferred[0]
        self.emit(RunPaused(reason=reason, node_id=node_id))
        await self.commit(boundary=False)
        self._report()

    async def _cancel(self, reason: str) -> None:
        # The cancel's resume point: a running node, else a node held at a pause point,
        # else one waiting out its retry backoff (all of them are pending in the state).
        resume_at = list(self.running) + [n for n, _, _ in self.deferred] + self.state.pending
        for node_id, (_attempt, branch) in list(self.running.items()):
            await self.node_refs[node_id].stop()
            # Partial outputs survive: the node's accumulator goes into memory as events.
            for key, value in list(self.state.outputs.get(node_id, {}).items()):
                op = self.reducers.get(key, "replace")
                self.emit(
                    MemoryWritten(key=key, value=value, op=op, node_id=node_id, branch=branch)
                )
        self.running.clear()
        self._stop_deciding()
        self.emit(RunCancelled(node_id=resume_at[0] if resume_at else None, reason=reason))
        await self.commit(boundary=False)
        self._report()

    async def _finish(self, status: RunStatus, error: str | None) -> None:
        if status == "completed":
            quality = "degraded" if self.state.failed_nodes else "clean"
        else:
            quality = "failed"
        goal_outcome = None
        if self.score_goal is not None and self.graph.goal is not None:
            # Measurement only: the scorecard changes neither the status nor the quality.
            goal_outcome = await self.score_goal(self.graph.goal, self.state, status, quality)
        self.emit(
            RunFinished(
                status=status,
                quality=quality,
                total_retries=self.state.total_retries,
                error=error,
                goal_outcome=goal_outcome,
            )
        )
        await self.commit(boundary=False)
        self._report()

    async def _fail_run(self, exc: Exception) -> bool:
        """Record an unexpected error (a commit hook, a node factory, a value the log cannot
        encode) as the run's failure, so no run stays "running" because something raised.
        False when the log cannot take it (a store error): the caller re-raises."""
        if self.stopping or self.log.failed is not None or isinstance(exc, StoreError):
            return False
        seq = self.log.last_seq
        try:
            await self._finish("failed", f"{type(exc).__name__}: {exc}")
        except Exception:
            if self.log.last_seq == seq or self.log.failed is not None:
                return False
            self._report()  # committed; what raised came after (a commit hook)
        return True

    def _report(self) -> None:
        """Stop, reporting the result the run's state gives (as a read of the log would)."""
        self.stopping = True
        state = self.state
        disown(state)  # the result shares the memory's lists with the state
        self.outcome.set(result_of(state, self.run_id))

    def _stop_deciding(self) -> None:
        for scope in self.deciding.values():
            scope.cancel()
        self.deciding.clear()

    def _stop_nodes(self) -> None:
        # The run's outcome is reported: nothing waits for the node actors to be gone.
        self._stop_deciding()
        for ref in self.nodes.values():
            ref.stop_nowait()
