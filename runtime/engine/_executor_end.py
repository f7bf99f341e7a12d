"""How the executor ends a run's stretch: paused at a node boundary, cancelled, finished
(with its goal scored), or failed by an unexpected error; then the result it reports.

Scoring the goal may call a model, so it runs in a task of its own (as an llm_decide
choice does) and its answer comes back as :class:`GoalScored`; ``RunFinished`` is
recorded then. Meanwhile the run's walk is over (``stopping``: no node starts, a pause
has no node boundary left to stop at, input is not taken) and only a cancel is handled.
A cancel then stops the scoring and records the end the graph reached, unscored
(``goal_outcome`` None): the run did reach that end, so recording it cancelled would
leave a resume nothing to run and lose its status and error (a resume of a run with no
node due completes it). A scorer that raises ends the run failed, the error recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import msgspec

from actors import ActorRef, ActorStoppedError, ActorSystem
from eventstore import EventBody, StoreError

from .._result import RunOutcome, result_of
from ..events._catalogue import (
    FinishedStatus,
    MemoryWritten,
    PauseReason,
    Quality,
    RunCancelled,
    RunFinished,
    RunPaused,
)
from ..events._memory import disown
from ..events._state import RunState
from ..llm._goals import GoalScorer
from ..spec._model import Goal, GraphSpec
from ._messages import GoalScored
from ._runlog import RunLog

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
    deferred: list[tuple[str, str | None, PauseReason]]
    deciding: dict[str, anyio.CancelScope]
    #: The run's walk is over: no node starts, and only the end is still to be recorded.
    stopping: bool
    #: While the goal is scored: the scoring task's scope and the end it is to record.
    scoring: anyio.CancelScope | None
    ending: RunFinished | None
    ref: ActorRef
    system: ActorSystem

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
        finished = self._stop_scoring()
        if finished is not None:
            # The graph reached its end before the cancel: that end is what happened, and
            # the cancel only stops the measuring (see the module docstring).
            await self._record_end(finished)
            return
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

    async def _finish(self, status: FinishedStatus, error: str | None) -> None:
        if self.stopping:
            return  # the run's end is already being recorded
        quality: Quality
        if status == "completed":
            # A judge or router whose call failed checked nothing: never "clean".
            failed = self.state.failed_nodes or self.state.judge_failures
            quality = "degraded" if failed else "clean"
        else:
            quality = "failed"
        finished = RunFinished(
            status=status, quality=quality, total_retries=self.state.total_retries, error=error
        )
        goal = self.graph.goal
        if self.score_goal is None or goal is None:
            await self._record_end(finished)
            return
        # Measurement only: the scorecard changes neither the status nor the quality.
        scope = anyio.CancelScope()
        self.system.start_task(self._score, self.score_goal, goal, finished, scope)
        self.scoring, self.ending = scope, finished
        self.stopping = True

    async def _score(
        self, scorer: GoalScorer, goal: Goal, finished: RunFinished, scope: anyio.CancelScope
    ) -> None:
        with scope:
            try:
                outcome = await scorer(goal, self.state, finished.status, finished.quality)
            except Exception as exc:  # handed to the executor, which records the run failed
                answer = GoalScored(error=exc)
            else:
                answer = GoalScored(outcome=outcome)
            try:
                await self.ref.tell(answer)
            except ActorStoppedError:
                pass  # the run stopped meanwhile: the answer has no one to go to

    async def _on_goal_scored(self, message: GoalScored) -> None:
        finished = self._stop_scoring()
        assert finished is not None  # only taken while scoring
        exc = message.error
        if exc is None:
            finished = msgspec.structs.replace(finished, goal_outcome=message.outcome)
        else:
            error = f"scoring the goal raised {type(exc).__name__}: {exc}"
            finished = RunFinished(
                status="failed",
                quality="failed",
                total_retries=finished.total_retries,
                error=error if finished.error is None else f"{finished.error}; {error}",
            )
        await self._record_end(finished)

    async def _record_end(self, finished: RunFinished) -> None:
        self.emit(finished)
        await self.commit(boundary=False)
        self._report()

    async def _fail_run(self, exc: Exception) -> bool:
        """Record an unexpected error (a commit hook, a node factory, a value the log cannot
        encode) as the run's failure, so no run stays "running" because something raised.
        False when the log cannot take it (a store error): the caller re-raises."""
        if self.outcome.done or self.log.failed is not None or isinstance(exc, StoreError):
            return False
        seq = self.log.last_seq
        error = f"{type(exc).__name__}: {exc}"
        try:
            if self.stopping:
                # Recording the run's end raised: record the failure, without scoring again.
                self._stop_scoring()
                failed = RunFinished(
                    status="failed",
                    quality="failed",
                    total_retries=self.state.total_retries,
                    error=error,
                )
                await self._record_end(failed)
            else:
                await self._finish("failed", error)
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

    def _stop_scoring(self) -> RunFinished | None:
        """Cancel the goal's scoring, if under way; return the end it was to record."""
        finished = self.ending
        if self.scoring is not None:
            self.scoring.cancel()
        self.scoring = self.ending = None
        return finished

    def _stop_deciding(self) -> None:
        for scope in self.deciding.values():
            scope.cancel()
        self.deciding.clear()

    def _stop_nodes(self) -> None:
        # The run's walk is over: nothing waits for the node actors to be gone.
        self._stop_deciding()
        for ref in self.nodes.values():
            ref.stop_nowait()
