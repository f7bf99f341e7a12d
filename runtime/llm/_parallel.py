"""Parallel branches of an LLM node: run N branches of a turn, pick one, continue with it.

An LLM node with ``parallel`` (see ``runtime.spec._parallel``) hands each of its rounds to
:class:`BranchRunner` instead of making one model call. A round:

1. Every branch starts from the node's conversation as it stands (the same messages, the
   same tools, its own provider, model, temperature or focus prompt) and runs the LLM
   loop on its own: model call, tool calls (``set_output`` goes to the branch's own
   accumulator), model call ... until the model answers without tool calls, or
   ``max_turns`` calls. The branches run concurrently. Each turn is a ``branch.turn``
   event and each tool result a ``branch.tool_result`` event, tagged with the branch
   (its index, 0-based, and label); a branch's end is a ``branch.finished`` event, in
   the order the branches finished.
2. The strategy picks a winner among the branches that answered (the ``llm_judge``
   strategy's call is a ``branches.judged`` event, and a prompt that cannot be fitted to
   the judge's budget a ``branches.judge_warning`` event).
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

import inspect
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from eventstore import EventBody

from .._errors import ProviderError, ToolTimeoutError
from ..engine._runlog import RunLog
from ..events._catalogue import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
    ToolCallRecord,
)
from ..providers._asked import asked_at
from ..providers._base import ChatMessage, LlmRequest, complete_uncut, refusal
from ..spec._model import GraphSpec, NodeSpec
from ..spec._parallel import BranchCandidate, BranchStrategy, ParallelSpec
from ._branch_judge import (
    DEFAULT_JUDGE_PROMPT,
    REPLY_RESERVE,
    build_judge_prompt,
    parse_choice,
    split_query,
    transcript,
)
from ._names import ProviderLookup
from ._prompt import build_system_prompt
from ._round import Branch, Round, restore_round, winner_bodies
from ._support import SET_OUTPUT, apply_set_output
from ._tool_calls import recorded_calls
from ._tools import ToolRegistry, run_tool_calls

__all__ = ["BranchRunner", "RoundFailed", "majority_key"]


class RoundFailed(Exception):
    """No branch of a round answered, or the strategy could not choose."""


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
                async with anyio.create_task_group() as tasks:
                    for branch in pending:
                        tasks.start_soon(
                            self._run_branch, branch, state, request, node, log, tools, graph
                        )
            state.selected = await self._select(state, request, log)
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
        declined = None if last is None else refusal(last.stop, last.text)
        if declined is not None:  # recorded before a crash: it fails as it would have
            await self._finish(branch, state, log, ok=False, error=declined)
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
        while len(branch.turns) < self.spec.max_turns:
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
            try:
                # The node's rule: a cut turn is asked once more with a larger cap, then
                # fails as truncated, so no call cut at the cap is ever run.
                with asked_at(
                    node.id, visit=state.visit, iteration=len(branch.turns) + 1, item=place
                ):
                    response = await complete_uncut(provider, branch_request)
            except ProviderError as exc:
                await self._finish(
                    branch, state, log, ok=False, error=f"{type(exc).__name__}: {exc}"
                )
                return
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
            refused_turn = refusal(response.stop, response.text)
            if refused_turn is not None:  # a fact of the round; the branch fails at once
                await log.append([turn])
                branch.turns.append(turn)
                await self._finish(branch, state, log, ok=False, error=refused_turn)
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
        await self._finish(
            branch,
            state,
            log,
            ok=False,
            error=f"no answer within max_turns ({self.spec.max_turns})",
        )

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
        )
        branch.finished = finished
        # The rank is the log's order: a batch's place is fixed when append is called.
        branch.finished_rank = state.finished
        state.finished += 1
        await log.append([finished])

    # ------------------------------------------------------------------ selection

    async def _select(self, state: Round, request: LlmRequest, log: RunLog) -> BranchesSelected:
        candidates = [
            BranchCandidate(
                index=b.index,
                label=b.label,
                text=b.finished.text,
                input_tokens=b.finished.input_tokens,
                output_tokens=b.finished.output_tokens,
                turns=b.finished.turns,
                finished=b.finished_rank,
                model=b.turns[-1].model if b.turns else "",
            )
            for b in state.branches
            if b.finished is not None and b.finished.ok
        ]
        if not candidates:
            errors = "; ".join(
                f"{b.label}: {b.finished.error if b.finished else 'did not finish'}"
                for b in state.branches
            )
            raise RoundFailed(f"no branch answered ({errors})")
        strategy = self.spec.strategy
        _, query = split_query(request.messages)
        if strategy == "first_success":
            chosen = min(candidates, key=lambda c: c.finished)
            reason = f"finished first of {len(candidates)} answers"
        elif strategy in ("fewest_tokens", "most_tokens"):
            sign = 1 if strategy == "fewest_tokens" else -1
            chosen = min(candidates, key=lambda c: sign * (c.input_tokens + c.output_tokens))
            reason = f"{chosen.input_tokens + chosen.output_tokens} tokens"
        elif strategy == "majority_vote":
            groups: dict[str, list[BranchCandidate]] = {}
            for candidate in candidates:
                groups.setdefault(majority_key(candidate.text), []).append(candidate)
            best = max(groups.values(), key=len)  # the first largest group: ties to the first
            chosen = best[0]
            reason = f"{len(best)} of {len(candidates)} answers agree"
        elif strategy == "llm_judge":
            chosen, reason = await self._judge(state, request, candidates, log)
        else:
            chosen, reason = await self._custom(strategy, candidates, query)
        selected = BranchesSelected(
            node_id=state.node_id,
            visit=state.visit,
            round=state.round,
            strategy=strategy,
            winner=chosen.index,
            label=chosen.label,
            reason=reason,
            candidates=[c.index for c in candidates],
        )
        return selected

    async def _custom(
        self, name: str, candidates: list[BranchCandidate], query: str
    ) -> tuple[BranchCandidate, str]:
        strategy = self.strategies.get(name)
        if strategy is None:
            raise RoundFailed(f"no branch strategy {name!r} is registered")
        try:
            choice = strategy.select(list(candidates), query)
            if inspect.isawaitable(choice):
                choice = await choice
        except Exception as exc:  # the user's strategy: its failure fails the node, named
            raise RoundFailed(f"branch strategy {name!r} raised {exc!r}") from exc
        for candidate in candidates:
            if isinstance(choice, int) and candidate.index == choice:
                return candidate, f"chosen by {name}"
        return candidates[0], f"{name} returned {choice!r}, not a candidate: the first answer"

    async def _judge(
        self, state: Round, request: LlmRequest, candidates: list[BranchCandidate], log: RunLog
    ) -> tuple[BranchCandidate, str]:
        judged = state.judged
        if judged is None:
            judge = self.spec.judge
            provider = self.providers(judge.provider)
            if provider is None:
                raise RoundFailed("the branch judge has no provider")
            prior, query = split_query(request.messages)
            budget = None
            if judge.max_context_tokens is not None:
                budget = max(1, judge.max_context_tokens - REPLY_RESERVE)
            prompt = build_judge_prompt(
                transcript(prior), query, [c.text for c in candidates], budget=budget
            )
            bodies: list[EventBody] = []
            tag = state.tag()
            if not prompt.fits:
                bodies.append(
                    BranchJudgeWarning(
                        **tag,
                        budget_tokens=budget or 0,
                        prompt_tokens=prompt.tokens,
                        message="the judge's prompt exceeds its budget after compaction",
                    )
                )
            judge_request = LlmRequest(
                messages=[ChatMessage(role="user", content=prompt.text)],
                system=judge.system_prompt or DEFAULT_JUDGE_PROMPT,
                model=judge.model,
                temperature=0.0,
                purpose="branch_judge",
            )
            started = time.perf_counter()
            try:
                with asked_at(state.node_id, visit=state.visit, item=str(state.round)):
                    response = await complete_uncut(provider, judge_request)
                text, error = response.text, refusal(response.stop, response.text)
                if error is not None:
                    text = ""  # a refusal is no choice: the judge did not run
            except ProviderError as exc:
                response, text, error = None, "", f"{type(exc).__name__}: {exc}"
            judged = BranchesJudged(
                **tag,
                text=text,
                error=error,
                prompt_tokens=prompt.tokens,
                compacted=prompt.compacted,
                input_tokens=response.usage.input_tokens if response else 0,
                output_tokens=response.usage.output_tokens if response else 0,
                latency_ms=(response.latency_ms if response else 0.0)
                or (time.perf_counter() - started) * 1000.0,
                model=response.model if response else "",
            )
            bodies.append(judged)
            await log.append(bodies)  # the judge's reply, before anything acts on it
        choice = parse_choice(judged.text, len(candidates))
        if choice is None:
            why = judged.error or f"no response number in {judged.text[:80]!r}"
            return candidates[0], f"judge fallback to the first answer: {why}"
        return candidates[choice], f"judge chose response {choice + 1}"


_NOT_WORD = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")


def majority_key(text: str) -> str:
    """An answer as majority voting compares it: lower case, no punctuation, single spaces."""
    return _SPACES.sub(" ", _NOT_WORD.sub(" ", text.lower())).strip()
