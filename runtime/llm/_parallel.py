"""Parallel branches of an LLM node: run N branches of a turn, pick one, continue with it.

An LLM node with ``parallel`` (see ``runtime.spec._parallel``) hands each of its rounds to
:class:`BranchRunner` instead of making one model call. A round:

1. Every branch starts from the node's conversation as it stands (the same messages, the
   same tools, its own provider, model, temperature or focus prompt) and runs the LLM
   loop on its own: model call, tool calls (``set_output`` goes to the branch's own
   accumulator), model call ... until the model answers without tool calls, or
   ``max_turns`` calls (no answer), or the node's turns left under its ``max_iterations``
   (the winner's turns become the node's, so no node exceeds its bound): when those are
   no more than ``max_turns``, a branch that reaches them ends with what it has, as the
   node's own last turn does, and the node's bound rules on the winner's last turn. The
   branches run concurrently. Each turn is a ``branch.turn`` event and each tool result
   a ``branch.tool_result`` event, tagged with the branch (its index, 0-based, and
   label); a branch's end is a ``branch.finished`` event, in the order the branches
   finished. A turn the model refused, or cut at the token cap twice, is recorded (with
   its tokens: it was paid for) and ends its branch, not ok; a call that failed ends it
   too, its ``branch.finished`` recording what it cost when it was paid for all the same
   (an answer that could not be read but said what it cost).
2. The strategy picks a winner among the branches that answered (``_branch_select``;
   the ``llm_judge`` strategy's call is a ``branches.judged`` event, and a prompt that
   cannot be fitted to the judge's budget a ``branches.judge_warning`` event; with one
   answer the judge is not asked).
3. ``branches.selected`` and the winner's messages, as the node's own ``llm.turn``,
   ``tool.result`` and ``output.set`` events, are committed in one batch: only the winner
   continues the node's conversation. The node's judge then rules on the winner's final
   turn as on any turn; a RETRY runs another round.

Copies of the winner's turns carry no token usage (it is counted once, on the branch
turns). A round is keyed by the node, its visit and the node's turn count when it began,
so an attempt rerun after a crash or a cancel finds what the round recorded: finished
branches are not run again, a branch's recorded turns are never sent to a model again (its
missing tool results run, then it continues), a recorded judge reply is reused, and a
recorded selection is final. What the round recorded comes from the run's live state (the
node's visit keeps its round in progress, see ``runtime.events._branch_round``), never from a
read of the log, so a round costs the same however long the run is. When no branch
answers, the node fails (``BranchesFailed``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from eventstore import EventBody

from .._errors import ProviderError, ToolTimeoutError, TruncatedError
from ..engine._runlog import RunLog
from ..events._catalogue import BranchFinished, BranchToolResult, BranchTurn, ToolCallRecord
from ..providers._asked import asked_at
from ..providers._base import LlmRequest, LlmResponse, Usage, complete_uncut, refusal, truncated
from ..spec._model import GraphSpec, NodeSpec
from ..spec._parallel import BranchStrategy, ParallelSpec
from ._branch_select import RoundFailed, majority_key, select
from ._meter import Meter, MeteredProvider
from ._names import ProviderLookup
from ._prompt import build_system_prompt
from ._round import Branch, Round, restore_round, winner_bodies
from ._support import SET_OUTPUT, apply_set_output
from ._tool_calls import recorded_calls
from ._tools import ToolRegistry, run_tool_calls

__all__ = ["BranchRunner", "RoundFailed", "majority_key"]


class BranchRunner:
    """Runs the rounds of one parallel LLM node (see the module docstring).

    ``providers`` resolves provider names (None: the runtime's provider); ``strategies``
    holds the custom strategies registered with the runtime.
    """

    def __init__(
        self,
        spec: ParallelSpec,
        *,
        providers: ProviderLookup,
        strategies: Mapping[str, BranchStrategy],
    ) -> None:
        self.spec = spec
        self.providers = providers
        self.strategies = strategies

    async def round(
        self,
        request: LlmRequest,
        *,
        node: NodeSpec,
        visit: int,
        iteration: int,
        log: RunLog,
        registry: ToolRegistry,
        graph: GraphSpec | None,
        tool_timeout: float | None = None,
    ) -> list[EventBody]:
        """Run (or finish) the round that starts after turn ``iteration`` of the visit.

        Returns what the node must record as one batch: ``branches.selected``, then the
        winner's turns, tool results and outputs as the node's events (turns numbered
        from ``iteration + 1``). Blocks on the branches' models and tools (a tool call
        past ``tool_timeout`` seconds finishes its branch, not ok) and on the log;
        cancelling it cancels the branches (what they recorded stays). Raises RoundFailed
        when no branch answered or a custom strategy failed; store errors propagate.
        """
        state = restore_round(self.spec, log, node.id, visit, iteration)
        if state.selected is None:
            pending = [b for b in state.branches if b.finished is None]
            if pending:
                tools = (registry, tool_timeout)
                try:
                    async with anyio.create_task_group() as tasks:
                        for branch in pending:
                            tasks.start_soon(
                                self._run_branch, branch, state, request, node, log, tools, graph
                            )
                except BaseExceptionGroup as group:  # the node's crash names what a branch raised
                    raise _first(group) from None
            state.selected = await select(
                self.spec,
                state,
                request,
                log,
                providers=self.providers,
                strategies=self.strategies,
            )
        winner = state.branches[state.selected.winner]
        return [state.selected, *winner_bodies(winner, node, iteration)]

    # ------------------------------------------------------------------ one branch

    async def _run_branch(
        self,
        branch: Branch,
        state: Round,
        request: LlmRequest,
        node: NodeSpec,
        log: RunLog,
        tools: tuple[ToolRegistry, float | None],
        graph: GraphSpec | None,
    ) -> None:
        spec = branch.spec
        provider = self.providers(spec.provider)
        tag = state.tag()
        last = branch.turns[-1] if branch.turns else None
        ended = None if last is None else _ended(last)
        if ended is not None:  # recorded before a crash: it fails as it would have
            await self._finish(branch, state, log, ok=False, error=ended)
            return
        missing = branch.missing_calls()
        if missing and not await self._run_tools(branch, state, missing, node, log, tools):
            return
        if last is not None and not last.tool_calls:
            await self._finish(branch, state, log, ok=True)
            return
        system = request.system
        if spec.system_prompt is not None:
            system = build_system_prompt(
                identity=graph.identity if graph else "",
                narrative=graph.narrative if graph else "",
                goal=graph.goal if graph else None,
                focus=spec.system_prompt,
                node_description=node.description,
                output_keys=node.output_keys,
                nullable_keys=node.nullable_keys,
            )
        limit, at_bound = self._limit(node, state)
        while len(branch.turns) < limit:
            if provider is None:
                await self._finish(branch, state, log, ok=False, error="no provider")
                return
            branch_request = LlmRequest(
                messages=[*request.messages, *branch.messages()],
                system=system,
                tools=request.tools,
                model=spec.model or request.model,
                temperature=spec.temperature,
                purpose="branch",
            )
            started = time.perf_counter()
            place = f"{state.round}/{branch.index}"  # where a recorded answer is found
            cut: ProviderError | None = None
            meter = Meter()  # each call's tokens as it returns: a failed one's too
            try:
                # The node's rule: a cut turn is asked once more with a larger cap, then
                # fails as truncated, so no call cut at the cap is ever run.
                with asked_at(
                    node.id, visit=state.visit, iteration=len(branch.turns) + 1, item=place
                ):
                    response = await complete_uncut(
                        MeteredProvider(provider, meter), branch_request
                    )
            except ProviderError as exc:
                # A turn cut twice is recorded, as a node records its own (it was paid
                # for); any other failure (a provider's own TruncatedError too) has no turn,
                # and what it cost, if it was paid for, is recorded with the branch's end.
                paid = exc.response if isinstance(exc, TruncatedError) else None
                if not isinstance(paid, LlmResponse):
                    error = f"{type(exc).__name__}: {exc}"
                    await self._finish(branch, state, log, ok=False, error=error, usage=meter.usage)
                    return
                response, cut = paid, exc
            calls, refused = recorded_calls(response.tool_calls)
            turn = BranchTurn(
                **tag,
                branch=branch.index,
                label=branch.label,
                iteration=len(branch.turns) + 1,
                text=response.text,
                tool_calls=calls,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                latency_ms=response.latency_ms or (time.perf_counter() - started) * 1000.0,
                model=response.model,
                stop=response.stop,
                input_cached=response.usage.input_cached,
                input_cache_write=response.usage.input_cache_write,
            )
            ended = refusal(response.stop, response.text)
            if cut is not None:
                ended = f"{type(cut).__name__}: {cut}"
            if ended is not None:  # a fact of the round (paid for); the branch fails at once
                await log.append([turn])
                branch.turns.append(turn)
                await self._finish(branch, state, log, ok=False, error=ended)
                return
            answered = [
                BranchToolResult(
                    **tag,
                    branch=branch.index,
                    call_id=c.id,
                    name=c.name,
                    content=refused[c.id],
                    is_error=True,
                )
                for c in calls
                if c.id in refused
            ]
            # Recorded before its tools run; a refused call is answered with it.
            await log.append([turn, *answered])
            branch.turns.append(turn)
            branch.results.update((r.call_id, r) for r in answered)
            if not turn.tool_calls:
                await self._finish(branch, state, log, ok=True)
                return
            runnable = [c for c in calls if c.id not in refused]
            if runnable and not await self._run_tools(branch, state, runnable, node, log, tools):
                return
        if at_bound:  # the node's last turn: it ends with what it has, as the node would
            await self._finish(branch, state, log, ok=True)
            return
        await self._finish(
            branch,
            state,
            log,
            ok=False,
            error=f"no answer within max_turns ({self.spec.max_turns})",
        )

    def _limit(self, node: NodeSpec, state: Round) -> tuple[int, bool]:
        """The model calls a branch of this round may make, and whether that is the
        node's own bound: its turns left (the winner's turns become the node's) when they
        are no more than ``max_turns``."""
        left = max(1, node.max_iterations - state.round)
        return min(left, self.spec.max_turns), left <= self.spec.max_turns

    async def _run_tools(
        self,
        branch: Branch,
        state: Round,
        calls: Sequence[ToolCallRecord],
        node: NodeSpec,
        log: RunLog,
        tools: tuple[ToolRegistry, float | None],
    ) -> bool:  # False: a call timed out, and the branch failed
        others = [c for c in calls if c.name != SET_OUTPUT]
        try:
            results = await run_tool_calls(tools[0], others, timeout=tools[1])
        except ToolTimeoutError as exc:
            await self._finish(branch, state, log, ok=False, error=f"ToolTimeoutError: {exc}")
            return False
        ran = {id(c): (text, err) for c, text, err in results}
        tag = state.tag()
        bodies: list[EventBody] = []
        for call in calls:
            key: str | None = None
            value: Any = None
            if call.name == SET_OUTPUT:
                text, is_error, assignment = apply_set_output(call, node.output_keys)
                if assignment is not None:
                    key, value = assignment
            else:
                text, is_error = ran[id(call)]
            result = BranchToolResult(
                **tag,
                branch=branch.index,
                call_id=call.id,
                name=call.name,
                content=text,
                is_error=is_error,
                output_key=key,
                output_value=value,
            )
            branch.results[call.id] = result
            bodies.append(result)
        await log.append(bodies)
        return True

    async def _finish(
        self,
        branch: Branch,
        state: Round,
        log: RunLog,
        *,
        ok: bool,
        error: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        finished = BranchFinished(
            **state.tag(),
            branch=branch.index,
            label=branch.label,
            ok=ok,
            text=branch.turns[-1].text if ok and branch.turns else "",
            error=error,
            turns=len(branch.turns),
            input_tokens=sum(t.input_tokens for t in branch.turns),
            output_tokens=sum(t.output_tokens for t in branch.turns),
            usage=usage,
        )
        branch.finished = finished
        # The rank is the log's order: a batch's place is fixed when append is called.
        branch.finished_rank = state.finished
        state.finished += 1
        await log.append([finished])


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error a branch raised: a store's or a provider's that is no ProviderError."""
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


def _ended(turn: BranchTurn) -> str | None:
    """The failure a branch's recorded last turn is (a refusal, or a turn cut at the token
    cap twice), or None."""
    cut = truncated(turn.stop)
    return refusal(turn.stop, turn.text) or (None if cut is None else f"TruncatedError: {cut}")
