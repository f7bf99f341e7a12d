"""A round's selection: the strategy that picks the winner among the parallel branches
that answered (see ``runtime.llm._parallel``).

The built-in strategies decide from the candidates alone (``first_success``,
``fewest_tokens``, ``most_tokens``, ``majority_vote``); ``llm_judge`` asks the branch
judge's model (the prompt and the reply's reading are ``_branch_judge``'s) and records
its call as ``branches.judged`` before anything acts on it, with what it cost (a reply
cut at the token cap twice is no choice, but its tokens were paid for; so were those of
a reply that could not be read but said what it cost); a custom strategy is the user's
object, registered with the runtime. With one answer there is nothing to choose: the
judge is not asked (unless the round recorded its call before a crash: that reply is
used). A strategy's answer that names no candidate (a judge's reply without a number in
1..N, a custom strategy's index that is no candidate's) gives the first answer, the
selection's ``error`` saying why: a check that did not run, a judge failure.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Mapping

from eventstore import EventBody

from .._errors import ProviderError, TruncatedError
from ..engine._runlog import RunLog
from ..events._catalogue import BranchesJudged, BranchesSelected, BranchJudgeWarning
from ..events._tokens import usage_fields
from ..providers._asked import asked_at
from ..providers._base import ChatMessage, LlmRequest, LlmResponse, complete_uncut, refusal
from ..spec._parallel import BranchCandidate, BranchStrategy, ParallelSpec
from ._branch_judge import (
    DEFAULT_JUDGE_PROMPT,
    REPLY_RESERVE,
    build_judge_prompt,
    parse_choice,
    split_query,
    transcript,
)
from ._meter import Meter, MeteredProvider
from ._names import ProviderLookup
from ._round import Round

__all__ = ["RoundFailed", "majority_key", "select"]


class RoundFailed(Exception):
    """No branch of a round answered, or the strategy could not choose."""


async def select(
    spec: ParallelSpec,
    state: Round,
    request: LlmRequest,
    log: RunLog,
    *,
    providers: ProviderLookup,
    strategies: Mapping[str, BranchStrategy],
) -> BranchesSelected:
    """The round's winner by ``spec``'s strategy, among the branches that finished ok.

    Blocks on the branch judge's model (``llm_judge`` with several answers, unless the
    round recorded its call) and on the log; raises RoundFailed when no branch answered
    or a custom strategy failed.
    """
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
    strategy = spec.strategy
    _, query = split_query(request.messages)
    error: str | None = None  # why the strategy's answer named no candidate
    if strategy == "llm_judge" and len(candidates) == 1 and state.judged is None:
        chosen, reason = candidates[0], "the only answer: the judge is not asked"
    elif strategy == "first_success":
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
        chosen, reason, error = await _judge(spec, state, request, candidates, log, providers)
    else:
        chosen, reason, error = await _custom(strategies, strategy, candidates, query)
    return BranchesSelected(
        node_id=state.node_id,
        visit=state.visit,
        round=state.round,
        strategy=strategy,
        winner=chosen.index,
        label=chosen.label,
        reason=reason,
        candidates=[c.index for c in candidates],
        error=error,
    )


async def _custom(
    strategies: Mapping[str, BranchStrategy],
    name: str,
    candidates: list[BranchCandidate],
    query: str,
) -> tuple[BranchCandidate, str, str | None]:
    strategy = strategies.get(name)
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
            return candidate, f"chosen by {name}", None
    error = f"{name} returned {choice!r}, not a candidate"
    return candidates[0], f"{error}: the first answer", error


async def _judge(
    spec: ParallelSpec,
    state: Round,
    request: LlmRequest,
    candidates: list[BranchCandidate],
    log: RunLog,
    providers: ProviderLookup,
) -> tuple[BranchCandidate, str, str | None]:
    judged = state.judged
    if judged is None:
        judge = spec.judge
        provider = providers(judge.provider)
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
        response: LlmResponse | None = None
        meter = Meter()  # each call's tokens as it returns: a failed one's too
        try:
            with asked_at(state.node_id, visit=state.visit, item=str(state.round)):
                response = await complete_uncut(MeteredProvider(provider, meter), judge_request)
            text, error = response.text, refusal(response.stop, response.text)
            if error is not None:
                text = ""  # a refusal is no choice: the judge did not run
        except TruncatedError as exc:  # no choice either, but both calls were paid for
            cut = exc.response
            response = cut if isinstance(cut, LlmResponse) else None
            text, error = "", f"{type(exc).__name__}: {exc}"
        except ProviderError as exc:  # no reply: what was paid for (an unreadable one) counts
            text, error = "", f"{type(exc).__name__}: {exc}"
        judged = BranchesJudged(
            **tag,
            text=text,
            error=error,
            prompt_tokens=prompt.tokens,
            compacted=prompt.compacted,
            latency_ms=(response.latency_ms if response else 0.0)
            or (time.perf_counter() - started) * 1000.0,
            model=response.model if response else "",
            **usage_fields(response.usage if response else meter.usage),
        )
        bodies.append(judged)
        await log.append(bodies)  # the judge's reply, before anything acts on it
    choice = parse_choice(judged.text, len(candidates))
    if choice is None:
        if judged.error is not None:  # a failed call: counted on its branches.judged
            return candidates[0], f"judge fallback to the first answer: {judged.error}", None
        unread = f"no response number in {judged.text[:80]!r}"  # the selection's failure
        return candidates[0], f"judge fallback to the first answer: {unread}", unread
    return candidates[choice], f"judge chose response {choice + 1}", None


_NOT_WORD = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")


def majority_key(text: str) -> str:
    """An answer as majority voting compares it: lower case, no punctuation, single spaces."""
    return _SPACES.sub(" ", _NOT_WORD.sub(" ", text.lower())).strip()
