"""How a run's stretch ends: finished (with its goal scored), failed by an unexpected
error, or stopped at a pause or a cancel the executor records; then the result it reports.

Scoring the goal may call a model, so it runs in a task of its own (as an llm_decide
choice does) and its answer comes back to the executor as :class:`GoalScored`;
``RunFinished`` is recorded then. Meanwhile the run's walk is over (``stopping``: no node
starts, a pause has no node boundary left to stop at, input given is refused: the input
given before was recorded first, see _intake.py) and only a cancel is handled. A cancel
then stops the scoring and records the end the graph reached, unscored (``goal_outcome``
None): the run did reach that end, so recording it cancelled would leave a resume nothing
to run and lose its status and error (a resume of a run with no node due completes it). A
scorer that raises ends the run failed, the error recorded. The scorecard leaves the
status as the graph made it; a criterion its evaluator failed to score is a judge failure
(the fold counts it from the scorecard), so a "clean" run is recorded "degraded".
"""

from __future__ import annotations

import anyio
import msgspec

from actors import Actor, ActorRef, ActorStoppedError
from eventstore import EventBody, StoreError

from .._result import RunOutcome, result_of
from ..events._catalogue import FinishedStatus, Quality, RunFinished
from ..events._memory import disown
from ..events._tokens import goal_usage_fields
from ..events._verdicts import goal_failures
from ..llm._goals import GoalScorer
from ..spec._model import Goal, GraphSpec
from ._intake import RECORDING, close
from ._messages import GoalScored
from ._runlog import RunLog

__all__ = ["RunEnding"]


class RunEnding:
    """The end of one run's stretch, for its executor (which gets the score: it passes
    itself to :meth:`finish` and :meth:`fail_run`, so this holds no reference to it)."""

    __slots__ = (
        "ending",
        "graph",
        "log",
        "outcome",
        "run_id",
        "score_goal",
        "scoring",
        "stopping",
    )

    def __init__(
        self,
        *,
        run_id: str,
        graph: GraphSpec,
        log: RunLog,
        outcome: RunOutcome,
        score_goal: GoalScorer | None,
    ) -> None:
        self.run_id = run_id
        self.graph = graph
        self.log = log
        self.outcome = outcome
        self.score_goal = score_goal
        #: The run's walk is over: no node starts, and only the end is still to be recorded.
        self.stopping = False
        #: While the goal is scored: the scoring task's scope and the end it is to record.
        self.scoring: anyio.CancelScope | None = None
        self.ending: RunFinished | None = None
        log.intake = None  # the stretch takes input (an in-memory log outlives its pauses)

    async def finish(self, owner: Actor, status: FinishedStatus, error: str | None) -> None:
        """End the run of the executor ``owner`` with ``status``: recorded now, or once its
        goal is scored (``owner`` gets the score)."""
        if self.stopping:
            return  # the run's end is already being recorded
        finished = self.finished(status, error)
        goal = self.graph.goal
        if self.score_goal is None or goal is None:
            await self.record(finished)
            return
        # Measurement: the scorecard never changes the status (on_goal_scored: the quality
        # only when an evaluator call failed). It reads memory as the walk ended: the input
        # given so far is recorded first, and none is taken while it scores.
        close(self.log, "scoring")
        scope = anyio.CancelScope()
        owner.system.start_task(self._score, self.score_goal, goal, finished, scope, owner.ref)
        self.scoring, self.ending = scope, finished
        self.stopping = True

    def finished(self, status: FinishedStatus, error: str | None) -> RunFinished:
        """The event ending the run with ``status``, unscored."""
        state = self.log.state
        quality: Quality
        if status == "completed":
            # A judge or router whose call failed checked nothing: never "clean".
            failed = state.failed_nodes or state.judge_failures
            quality = "degraded" if failed else "clean"
        else:
            quality = "failed"
        return RunFinished(
            status=status, quality=quality, total_retries=state.total_retries, error=error
        )

    async def _score(
        self,
        scorer: GoalScorer,
        goal: Goal,
        finished: RunFinished,
        scope: anyio.CancelScope,
        owner: ActorRef,
    ) -> None:
        with scope:
            try:
                scored = await scorer(goal, self.log.state, finished.status, finished.quality)
            except Exception as exc:  # handed to the executor, which records the run failed
                answer = GoalScored(error=exc)
            else:
                answer = GoalScored(outcome=scored.outcome, usage=scored.usage)
            try:
                await owner.tell(answer)
            except ActorStoppedError:
                pass  # the run stopped meanwhile: the answer has no one to go to

    async def on_goal_scored(self, message: GoalScored) -> None:
        finished = self.stop_scoring()
        assert finished is not None  # only taken while scoring
        exc = message.error
        if exc is None:
            finished = msgspec.structs.replace(
                finished, goal_outcome=message.outcome, **goal_usage_fields(message.usage)
            )
            if finished.quality == "clean" and goal_failures(message.outcome):
                # A goal check that did not run: the fold counts it as a judge failure.
                finished = msgspec.structs.replace(finished, quality="degraded")
        else:
            error = f"scoring the goal raised {type(exc).__name__}: {exc}"
            finished = RunFinished(
                status="failed",
                quality="failed",
                total_retries=finished.total_retries,
                error=error if finished.error is None else f"{finished.error}; {error}",
            )
        await self.record(finished)

    async def record(self, body: EventBody) -> None:
        """Record the event ending the stretch (finished, paused, cancelled), with what
        is staged, durably whatever the graph's durability, and a snapshot of the state
        at rest in the same commit when due (its head recorded as every commit's is); then
        report the result. The input given before it is recorded first; none is taken after."""
        close(self.log, "ended")
        self.log.stage(body)
        recording = RECORDING.set(self.run_id)  # for its commit hooks (_intake.py)
        try:
            # Unshielded: only the actor system's exit cancels an executor (RunLog.append).
            await self.log.append((), durable=True, shield=False, at_rest=True)
        finally:
            RECORDING.reset(recording)
        self.report()

    async def fail_run(self, owner: Actor, exc: Exception) -> bool:
        """Record an unexpected error (a commit hook, a node factory, a value the log cannot
        encode) as the run's failure, so no run stays "running" because something raised.
        False when the log cannot take it (a store error), or when nothing of the run was
        ever handed to the store and nothing is staged (its first batch refused as bad
        input: a log holding only its end is no run's): the caller re-raises, and the
        start waiting for that batch raises the error (control/_launch.py)."""
        log = self.log
        if self.outcome.done or log.failed is not None or isinstance(exc, StoreError):
            return False
        if log.last_seq == 0 and not log.pending:
            return False
        seq = self.log.last_seq
        error = f"{type(exc).__name__}: {exc}"
        try:
            if self.stopping:
                # Recording the run's end raised: record the failure, without scoring again.
                self.stop_scoring()
                failed = RunFinished(
                    status="failed",
                    quality="failed",
                    total_retries=self.log.state.total_retries,
                    error=error,
                )
                await self.record(failed)
            else:
                await self.finish(owner, "failed", error)
        except Exception:
            if self.log.last_seq == seq or self.log.failed is not None:
                return False
            self.report()  # committed; what raised came after (a commit hook)
        return True

    def report(self) -> None:
        """Stop, reporting the result the run's state gives (as a read of the log would)."""
        self.stopping = True
        state = self.log.state
        disown(state)  # the result shares the memory's lists with the state
        self.outcome.set(result_of(state, self.run_id))

    def stop_scoring(self) -> RunFinished | None:
        """Cancel the goal's scoring, if under way; return the end it was to record."""
        finished = self.ending
        if self.scoring is not None:
            self.scoring.cancel()
        self.scoring = self.ending = None
        return finished
