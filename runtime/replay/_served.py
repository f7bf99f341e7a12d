"""What a replay runs with in place of the outside world: the recorded model answers,
tool results, function outcomes and custom verdicts of :class:`RecordedRun`, served by
where they are asked. Nothing here calls a model or a tool.

A request with no recorded answer stops the replay (:class:`Stop` says why, and how far
the replay's log had got); the run is then cancelled by the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from .._errors import ProviderError, ToolTimeoutError, TruncatedError, UnknownToolError
from ..engine._function_node import NodeContext
from ..llm._tools import Tool, ToolRegistry
from ..llm._verdict import JudgeContext, JudgeVerdict
from ..providers._asked import where_asked
from ..providers._base import LlmProvider, LlmRequest, LlmResponse
from ._recorded import PROVIDER_FAILURES, TIMED_OUT, RecordedRun, Served, ToolAnswer
from ._timing import BranchFinishes, Injections

__all__ = [
    "RecordedJudge",
    "ReplayProvider",
    "ServedTool",
    "ServedTools",
    "Stop",
    "recorded_function",
    "served_tool",
]


class Stop:
    """The first reason the replay cannot go on, and the number of events its log had
    committed then (what came after is the stop's own doing, never compared)."""

    def __init__(self, position: Callable[[], int]) -> None:
        self.reason: str | None = None
        self.at: int | None = None
        self.event = anyio.Event()
        self._position = position

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.at = self._position()
            self.event.set()


class ReplayStopped(ProviderError):
    """Raised to the asker of a request that has no recorded answer."""

    def __init__(self, reason: str) -> None:
        super().__init__("replay", reason)


class _RecordedFailure(ProviderError):
    """A recorded failure raised again in the recorded words (``str`` is ``text``)."""

    def __init__(self, text: str) -> None:
        super().__init__("replay", text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class ReplayProvider:
    """A provider answering from the log: node turns by (node, visit, iteration), Level 2
    answers by the turn they judge, routes by the source's n-th decision, verifier
    evaluations by (node, visit, attempt), goal evaluations by criterion, parallel
    branches' turns by (node, visit, round/branch, turn), each branch's last one once the
    branches that finished before it in the record have (``finishes``)."""

    def __init__(
        self,
        recorded: RecordedRun,
        stop: Stop,
        *,
        live: Callable[[str, str], LlmProvider | None] | None = None,
        finishes: BranchFinishes | None = None,
    ) -> None:
        self.name = "replay"
        self.recorded = recorded
        self.stopped = stop
        #: rejudge: who answers the Level 2 judge and llm_judge verifiers live.
        self.live = live
        #: Parallel branches finish in their recorded order: see ``_timing``.
        self.finishes = finishes
        self.calls = 0
        self.live_calls = 0
        self._visit: dict[str, int] = {}
        self._routes: dict[str, int] = {}
        self._turns: dict[tuple[str, int], int] = {}

    async def complete(self, request: LlmRequest) -> LlmResponse:
        place = where_asked()
        purpose = request.purpose
        served: Served | None = None
        failed: tuple[str, str] | None = None  # a call that failed with no answer recorded
        where = "an unknown place"
        recorded = self.recorded
        if place is not None and self.live is not None and purpose in ("judge", "verify"):
            return await self._ask_live(purpose, place.node, request)
        if place is not None:
            node = place.node
            if purpose == "turn":
                visit = self._visit[node] = place.visit or 1
                turn = self._turns[(node, visit)] = self._turns.get((node, visit), 0) + 1
                where = f"node `{node}` visit {visit} turn {turn}"
                served = recorded.turns.get((node, visit, turn))
                failed = recorded.turn_failures.get((node, visit, turn))
            elif purpose == "judge":
                visit = self._visit.get(node, 1)
                where = f"the Level 2 judge of node `{node}` visit {visit} turn {place.iteration}"
                served = recorded.judged.get((node, visit, place.iteration or 0))
            elif purpose == "route":
                count = self._routes[node] = self._routes.get(node, 0) + 1
                where = f"the llm_decide choice #{count} after node `{node}`"
                served = recorded.routes.get((node, count))
            elif purpose == "verify":
                where = f"the evaluator of verifier `{node}` visit {place.visit}"
                key = (node, place.visit or 1, place.iteration or 1)
                served, failed = recorded.verified.get(key), recorded.verify_failures.get(key)
            elif purpose == "outcome":
                where = f"the goal evaluator of criterion `{place.item}`"
                served = recorded.goal.get(place.item or "")
            elif purpose == "branch":
                visit, item, turn = place.visit or 1, place.item or "", place.iteration or 0
                where = f"branch {item} of node `{node}` visit {visit} turn {turn}"
                served = recorded.branch_turns.get((node, visit, item, turn))
                failed = recorded.branch_failures.get((node, visit, item, turn))
                found = served is not None or failed is not None
                if found and self.finishes is not None:
                    await self.finishes.before_answer(node, visit, item, turn)
            elif purpose == "branch_judge":
                visit, item = place.visit or 1, place.item or ""
                where = f"the branch judge of node `{node}` visit {visit} round {item}"
                served = recorded.branch_judged.get((node, visit, item))
        if served is None and failed is not None:  # it fails again, in its recorded words
            self.calls += 1
            raise _failure(*failed)
        if served is None:
            reason = f"no recorded model answer for {where}"
            self.stopped.stop(reason)
            await anyio.sleep_forever()  # the driver cancels the run
            raise ReplayStopped(reason)  # pragma: no cover - sleep_forever never returns
        self.calls += 1
        if isinstance(served, str):
            if purpose == "outcome":  # the criterion's reasoning says it: the same again
                raise _RecordedFailure(served.removeprefix("the evaluator failed: "))
            kind, _, said = served.partition(": ")
            if purpose == "branch_judge" and kind in PROVIDER_FAILURES:
                raise _failure(kind, said)  # the reason the fallback gives is the same again
            raise ProviderError("replay", f"(recorded failure) {served}")
        if served.stop == "max_tokens":  # a turn cut twice: it fails as it did
            raise TruncatedError("replay", served.usage.output_tokens, response=served)
        return served

    async def _ask_live(self, purpose: str, node: str, request: LlmRequest) -> LlmResponse:
        assert self.live is not None
        provider = self.live(purpose, node)
        if provider is None:
            reason = f"rejudge has no provider to ask for node `{node}`'s {purpose} call"
            self.stopped.stop(reason)
            await anyio.sleep_forever()
            raise ReplayStopped(reason)  # pragma: no cover - sleep_forever never returns
        self.live_calls += 1
        return await provider.complete(request)


class ServedTool(Tool):
    """A tool of the graph answering with the recorded result of the same call (a call
    that ran past its time limit in the record raises ToolTimeoutError again)."""

    async def execute(
        self, arguments: dict[str, Any], *, timeout: float | None = None
    ) -> tuple[str, bool]:
        served: ToolAnswer = self.fn(arguments)
        if served == TIMED_OUT:
            raise ToolTimeoutError(self.name, timeout or 0.0)
        assert not isinstance(served, str)
        return served


class ServedTools(ToolRegistry):
    """The graph's tools by the names its nodes give them (a registered name or an
    import path, never imported), each a :class:`ServedTool`."""

    def __init__(self, tools: dict[str, Tool]) -> None:
        super().__init__()
        self._served = tools

    def get(self, name: str) -> Tool:
        found = self._served.get(name)
        if found is None:
            raise UnknownToolError(name, list(self._served))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._served


def served_tool(name: str, recorded: RecordedRun, stop: Stop) -> ServedTool:
    def answer(arguments: dict[str, Any]) -> ToolAnswer:
        found = recorded.tool_result(name, arguments)
        if found is None:
            stop.stop(f"no recorded result for tool `{name}` called with {arguments!r}")
            return "the replay has no recorded result for this call", True
        return found

    return ServedTool(name=name, description="", parameters={"type": "object"}, fn=answer)


class _Turnstile:
    """Served function nodes that run at the same time (in parallel branches) finish in
    the order they finished in the recorded run, so conflict strategies, which go by the
    order branches finish, meet the same order. An attempt waits only for attempts that
    finished before it in the record and are running now: never for one that may not come.
    """

    def __init__(self) -> None:
        self.running: dict[int, anyio.Event] = {}

    async def enter(self, at: int) -> anyio.Event:
        done = self.running[at] = anyio.Event()
        for _ in range(3):  # the branches started with this one reach here too
            await anyio.lowlevel.checkpoint()
        waited = False
        for other in sorted(self.running):
            if other < at:
                await self.running[other].wait()
                waited = True
        for _ in range(3 if waited else 0):  # and its node tells the executor first
            await anyio.lowlevel.checkpoint()
        return done

    def leave(self, at: int, done: anyio.Event) -> None:
        done.set()
        if self.running.get(at) is done:
            del self.running[at]


def _failure(error_type: str, error: str) -> ProviderError:
    """The provider error a node's model call failed with, again, in its recorded words."""
    failure = PROVIDER_FAILURES[error_type]("replay", error)
    failure.args = (error,)
    return failure


def recorded_function(
    recorded: RecordedRun, stop: Stop, injections: Injections | None = None
) -> Callable[..., Any]:
    """A node callable (taking ``inputs, ctx``) that gives back the recorded outcome of
    the node's visit and attempt, partial outputs first, after the input injected before
    it in the record (``injections``)."""
    turnstile = _Turnstile()

    async def serve(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        outcome = recorded.functions.get((ctx.node_id, ctx.visit, ctx.attempt))
        if outcome is None:
            stop.stop(
                f"function node `{ctx.node_id}` visit {ctx.visit} attempt {ctx.attempt} has "
                "no recorded outcome (rerun_functions runs it again)"
            )
            await anyio.sleep_forever()
        assert outcome is not None
        done = await turnstile.enter(outcome.at)
        try:
            if injections is not None:
                await injections.before(outcome.at)
            for key, value in outcome.partial:
                await ctx.set_output(key, value)
            if outcome.outputs is None:
                error = type(outcome.error_type or "RecordedFailure", (Exception,), {})
                raise error(_bare(outcome.error, outcome.error_type))
            return dict(outcome.outputs)
        finally:
            turnstile.leave(outcome.at, done)

    return serve


def _bare(error: str, error_type: str) -> str:
    prefix = f"{error_type}: "
    return error[len(prefix) :] if error.startswith(prefix) else error


class RecordedJudge:
    """A custom judge that may not be imported: its recorded verdicts, by turn."""

    def __init__(self, recorded: RecordedRun, stop: Stop) -> None:
        self.recorded = recorded
        self.stop = stop
        self._visits: dict[tuple[str, int], int] = {}

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        place = (context.node_id, context.iteration)
        visit = self._visits[place] = self._visits.get(place, 0) + 1
        verdict = self.recorded.custom.get((context.node_id, visit, context.iteration))
        if verdict is None:
            self.stop.stop(
                f"no recorded verdict of node `{context.node_id}`'s custom judge for turn "
                f"{context.iteration} (allow its import to decide again)"
            )
            await anyio.sleep_forever()
        assert verdict is not None
        action: Any = verdict.action
        return JudgeVerdict(
            action=action,
            level="custom",
            feedback=verdict.feedback,
            confidence=verdict.confidence,
        )
