"""What a run reports when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from actors import new_waiter

from ._errors import RunStateError
from .events._state import RunState
from .spec._goal import GoalOutcome

__all__ = ["FINAL", "RunOutcome", "RunResult", "RunStatus", "result_from_state", "result_of"]

RunStatus = Literal["completed", "failed", "paused", "cancelled"]


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one run (or of one stretch of it, for paused and cancelled runs).

    ``quality`` is "clean" (no node failed for good), "degraded" (some node failed but the
    graph reached its end by a fallback edge) or "failed"; None while paused or cancelled.
    ``resume_at`` lists the nodes a resume would run next. ``visits`` counts each node's
    visits, ``iterations`` its LLM turns over the run, ``verdicts`` its verdicts by action
    (a turn that called tools counts as ``retry``, the bail-out, as docs/GOALS.md says)
    and ``tool_turns`` those turns alone; ``goal_outcome`` is the goal scorecard of a
    finished run whose graph has a goal (measurement only: see docs/GOALS.md).
    """

    run_id: str
    status: RunStatus
    quality: Literal["clean", "degraded", "failed"] | None = None
    memory: dict[str, Any] = {}
    path: list[str] = []
    steps: int = 0
    total_retries: int = 0
    error: str | None = None
    resume_at: list[str] = []
    paused_reason: str | None = None
    visits: dict[str, int] = {}
    iterations: dict[str, int] = {}
    verdicts: dict[str, dict[str, int]] = {}
    tool_turns: dict[str, int] = {}
    goal_outcome: GoalOutcome | None = None


_STOPPED = ("completed", "failed", "paused", "cancelled")
#: The statuses a run never leaves.
FINAL = ("completed", "failed")


def result_of(state: RunState, run_id: str | None = None) -> RunResult:
    """The result a stopped run's state gives: the same whether the state is the live one
    or the fold of the run's log. Raises ValueError for a run that has not stopped."""
    status = state.status
    if status not in _STOPPED:
        raise ValueError(f"run {state.run_id!r} is {status}: it has no result yet")
    return RunResult(
        run_id=run_id or state.run_id,
        status=status,  # type: ignore[arg-type]  # checked just above
        quality=state.quality,
        memory=dict(state.memory),
        path=list(state.path),
        steps=state.steps,
        total_retries=state.total_retries,
        error=state.error,
        resume_at=list(state.pending),
        paused_reason=state.paused.reason if state.paused else None,
        visits=dict(state.visit_counts),
        iterations=dict(state.turns),
        verdicts=_with_tool_turns(state.verdict_counts, state.tool_turns),
        tool_turns=dict(state.tool_turns),
        goal_outcome=_goal_outcome(state.goal_outcome),
    )


def result_from_state(state: RunState) -> RunResult:
    """:func:`result_of`, raising RunStateError for a run that has not stopped."""
    if state.status not in _STOPPED:
        raise RunStateError(state.run_id, state.status, "the run has no result yet")
    return result_of(state)


def _goal_outcome(data: dict[str, Any] | None) -> GoalOutcome | None:
    if data is None:
        return None
    try:
        return msgspec.convert(data, GoalOutcome)
    except msgspec.ValidationError:
        # A shape this release does not know (a log written by other code): the raw
        # mapping stays readable in RunState.goal_outcome.
        return None


class RunOutcome:
    """Where the executor leaves its result; ``wait()`` blocks until it does."""

    __slots__ = ("_callers", "_on_done", "_waiter", "error", "result")

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        # A one-shot waiter (a bare future on asyncio), not an anyio.Event: one per run.
        self._waiter = new_waiter()
        # On asyncio, each caller waiting in settled() has a future of its own (its
        # cancellation cancels only that one), woken with the waiter: cheaper than a
        # shield of the waiter (an outer future and two closures per caller).
        self._callers: tuple[asyncio.Future[None], ...] = ()
        self._on_done = on_done
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    def set(self, result: RunResult) -> None:
        if not self._waiter.done():
            self.result = result
            self._done()

    def fail(self, error: BaseException) -> None:
        if not self._waiter.done():
            self.error = error
            self._done()

    def _done(self) -> None:
        self._waiter.set_result(None)
        callers, self._callers = self._callers, ()
        for caller in callers:
            if not caller.done():
                caller.set_result(None)
        # Dropped once called: the callback usually refers back to this outcome, and a
        # cycle would keep every finished run alive until the cyclic collector runs.
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()

    @property
    def done(self) -> bool:
        return self._waiter.done()

    async def settled(self) -> None:
        """Wait until the outcome is set or failed, without raising the failure."""
        waiter = self._waiter
        if not waiter.done():
            if isinstance(waiter, asyncio.Future):
                # A future of this caller's own: a cancelled caller must not cancel the
                # waiter others wait on.
                own = asyncio.get_running_loop().create_future()
                self._callers = (*self._callers, own)
                try:
                    await own
                finally:
                    if not own.done() or own.cancelled():
                        self._callers = tuple(c for c in self._callers if c is not own)
            else:
                await waiter

    async def wait(self) -> RunResult:
        await self.settled()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _with_tool_turns(
    judged: dict[str, dict[str, int]], tool_turns: dict[str, int]
) -> dict[str, dict[str, int]]:
    """The judged verdicts by action with each tool turn counted as a ``retry``."""
    counts = {node: dict(by_action) for node, by_action in judged.items()}
    for node, turns in tool_turns.items():
        by_action = counts.setdefault(node, {})
        by_action["retry"] = by_action.get("retry", 0) + turns
    return counts
