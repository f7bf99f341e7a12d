"""What a run reports when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from actors import Waiter, new_waiter

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
    """Where the executor leaves its result, and what hands it to whoever waits for it.

    Each wait is a one-shot waiter of the caller's own (a bare future on asyncio) that
    receives the result itself: a caller's cancellation cancels only its own wait, and a
    ``result()`` caller waits in no coroutine of the outcome's.
    """

    __slots__ = ("_callers", "_on_done", "_settlers", "done", "error", "result")

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        #: Whether the outcome is set or failed (it never changes after).
        self.done = False
        # wait()'s waiters, answered once the result is delivered: None, one waiter (the
        # usual single caller), or a tuple of them.
        self._callers: Any = None
        self._settlers: tuple[Waiter, ...] = ()  # settled()'s, woken once done
        self._on_done = on_done
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    def set(self, result: RunResult) -> None:
        if not self.done:
            self.result = result
            self._done()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self._done()

    def ending(self, expected_seq: int) -> None:
        """The run's final batch is about to be handed to its store at ``expected_seq``,
        none of its nodes running (engine/_end_now.py): nothing to do here; a run executed
        under a claim gives the claim up with that batch (control/_owned_outcome.py)."""

    def _done(self) -> None:
        self.done = True
        settlers, self._settlers = self._settlers, ()
        for settler in settlers:
            if not settler.done():
                settler.set_result(None)
        # Dropped once called: the callback usually refers back to this outcome, and a
        # cycle would keep every finished run alive until the cyclic collector runs.
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()
        if self._deliverable():
            self._deliver()

    def _deliverable(self) -> bool:
        """Whether a waiter may have the result now (once done, here)."""
        return self.done

    def _deliver(self) -> None:
        callers, self._callers = self._callers, None
        if callers is None:
            return
        for caller in callers if type(callers) is tuple else (callers,):
            if not caller.done():  # done already: its caller gave up (cancelled)
                self._answer(caller)

    def _answer(self, caller: Waiter) -> None:
        if not isinstance(caller, asyncio.Future):
            caller.set_result(None)  # another backend's event: its wait reads the fields
        elif self.error is not None:
            caller.set_exception(self.error)
        else:
            caller.set_result(self.result)

    def wait(self) -> Awaitable[RunResult]:
        """An awaitable of the run's result; awaiting it raises whatever stopped the
        executor instead. It blocks until the result is delivered (once the outcome is
        done, here). Each call's wait is its own: cancelling it affects neither the run
        nor anyone else's wait."""
        waiter = new_waiter()
        if not isinstance(waiter, asyncio.Future):
            return self._wait_event(waiter)
        if self._deliverable():
            self._answer(waiter)
        else:
            callers = self._callers
            if callers is None:
                self._callers = waiter
            else:  # callers that gave up are dropped here, so polling does not pile up
                alive = (callers,) if type(callers) is not tuple else callers
                self._callers = (*[c for c in alive if not c.done()], waiter)
        return waiter

    async def _wait_event(self, waiter: Waiter) -> RunResult:
        """:meth:`wait` on an anyio backend other than asyncio."""
        if not self._deliverable():
            callers = self._callers
            alive = () if callers is None else callers if type(callers) is tuple else (callers,)
            self._callers = (*alive, waiter)
            await waiter
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    async def settled(self) -> None:
        """Wait until the outcome is set or failed, without raising the failure.
        Cancelling the wait affects nothing else."""
        if self.done:
            return
        own = new_waiter()
        self._settlers = (*self._settlers, own)
        try:
            await own
        finally:
            if not self.done:
                self._settlers = _without(self._settlers, own)


def _without(waiters: tuple[Waiter, ...], waiter: Waiter) -> tuple[Waiter, ...]:
    """``waiters`` less ``waiter`` (a function of its own: a comprehension inside the
    coroutine would keep ``waiter`` in a cell for the whole wait)."""
    return tuple(w for w in waiters if w is not waiter)


def _with_tool_turns(
    judged: dict[str, dict[str, int]], tool_turns: dict[str, int]
) -> dict[str, dict[str, int]]:
    """The judged verdicts by action with each tool turn counted as a ``retry``."""
    counts = {node: dict(by_action) for node, by_action in judged.items()}
    for node, turns in tool_turns.items():
        by_action = counts.setdefault(node, {})
        by_action["retry"] = by_action.get("retry", 0) + turns
    return counts
