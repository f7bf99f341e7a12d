"""The goal scorecard: score a finished run against its goal (measurement only).

At the end of a run (completed or failed) the executor calls :func:`evaluate_goal` and
records the :class:`GoalOutcome` in ``RunFinished.goal_outcome`` (and the tokens of the
evaluator's calls in its ``goal_*`` token counts). No node runs again and
the status stays what the graph made it; a criterion the evaluator was to score and did
not (its ``error`` set) is a judge failure, so a completed run is then at best "degraded".

- A criterion with an ``expression`` is scored over the final memory (see
  :class:`SuccessCriterion`); an expression that cannot be evaluated scores 0, its error
  in ``reasoning``.
- A criterion without one is scored by the goal's ``evaluator`` (a provider name), one
  call per criterion, the reply read as a verifier's (a score from 0 to 1); a reply with
  no score, or an evaluator call that raised (a ProviderError, such as the TruncatedError
  of a reply cut at the token cap twice, or anything else a provider raises), leaves it
  unscored with the reason in ``reasoning`` and ``error``: scoring
  never fails the run. Without an evaluator it stays unscored (no error).
- A constraint with an ``expression`` must hold (be truthy); one without is unchecked.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import msgspec

from .._errors import ExpressionError, ProviderError
from ..events._state import RunState
from ..events._tokens import add_usage
from ..providers._asked import asked_at
from ..providers._base import ChatMessage, LlmRequest, Usage, complete_uncut
from ..spec._expr import compile_expression
from ..spec._goal import (
    Constraint,
    ConstraintOutcome,
    CriterionOutcome,
    GoalOutcome,
    SuccessCriterion,
    constraint_id,
    criterion_id,
    plain,
)
from ..spec._model import Goal
from ._meter import Meter, MeteredProvider
from ._names import ProviderLookup
from ._verifier import parse_score

__all__ = ["OUTCOME_SYSTEM_PROMPT", "GoalScorer", "ScoredGoal", "evaluate_goal", "score_goal"]


class ScoredGoal(msgspec.Struct, frozen=True, kw_only=True):
    """A run's goal scored: ``outcome``, the scorecard as the plain mapping RunFinished
    records, and ``usage``, the tokens of the evaluator's calls (None: none was made),
    which RunFinished records as its ``goal_*`` token counts."""

    outcome: dict[str, Any]
    usage: Usage | None = None


#: What the executor calls at the end of a run: (goal, state, status, quality) -> the
#: scored goal.
GoalScorer = Callable[[Goal, RunState, str, str], Awaitable[ScoredGoal]]

OUTCOME_SYSTEM_PROMPT: Final = (
    "You assess whether a finished job met one success criterion of its goal, from the "
    "job's final results. Answer with one JSON object: "
    '{"score": <number from 0 (not met at all) to 1 (fully met)>, "reasoning": "<one sentence>"}.'
)
_MAX_MEMORY_CHARS: Final = 40_000


async def evaluate_goal(
    goal: Goal,
    *,
    memory: Mapping[str, Any],
    run: Mapping[str, Any],
    providers: ProviderLookup,
) -> tuple[GoalOutcome, Usage | None]:
    """Score ``goal`` against a finished run's ``memory`` and ``run`` facts: the
    scorecard, and the tokens of the evaluator's calls (a failed but paid one's too: a
    cut answer whose re-ask was cut again or failed; None when no call was made or none
    reported usage).

    ``run`` holds ``status``, ``quality``, ``total_retries``, ``steps`` and ``path``.
    Blocks only on evaluator calls (criteria without an expression, when the goal has an
    ``evaluator``); never raises for a bad expression or a failed model call, which
    are reported in the outcome.
    """
    goal_data = plain(goal)
    names = {**memory, "memory": dict(memory), "goal": goal_data, "run": dict(run)}
    criteria: list[CriterionOutcome] = []
    usage: Usage | None = None
    for index, item in enumerate(goal.success_criteria):
        criterion, paid = await _criterion(goal, index, item, names, memory, providers)
        criteria.append(criterion)
        usage = add_usage(usage, paid)
    constraints = [_constraint(index, item, names) for index, item in enumerate(goal.constraints)]
    scored = [c for c in criteria if c.score is not None]
    total_weight = sum(c.weight for c in scored)
    score: float | None = None
    if scored:
        if total_weight > 0:
            score = sum(c.weight * (c.score or 0.0) for c in scored) / total_weight
        else:
            score = sum(c.score or 0.0 for c in scored) / len(scored)
    checks = [c.met for c in scored] + [c.held for c in constraints if c.held is not None]
    outcome = GoalOutcome(
        score=None if score is None else round(score, 6),
        met=all(checks) if checks else None,
        criteria=criteria,
        constraints=constraints,
        evaluated_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
    )
    return outcome, usage


async def _criterion(
    goal: Goal,
    index: int,
    item: str | SuccessCriterion,
    names: Mapping[str, Any],
    memory: Mapping[str, Any],
    providers: ProviderLookup,
) -> tuple[CriterionOutcome, Usage | None]:
    """One criterion's outcome, and the tokens of the evaluator's call that scored it."""
    ident = criterion_id(item, index)
    if isinstance(item, str):
        criterion = SuccessCriterion(description=item)
    else:
        criterion = item

    def outcome(
        method: Literal["expression", "model", "unscored"],
        *,
        score: float | None = None,
        met: bool | None = None,
        reasoning: str = "",
        error: str | None = None,
    ) -> CriterionOutcome:
        return CriterionOutcome(
            id=ident,
            description=criterion.description,
            method=method,
            score=score,
            met=met,
            weight=criterion.weight,
            reasoning=reasoning,
            error=error,
        )

    def failed(error: str) -> CriterionOutcome:
        return outcome("unscored", reasoning=error, error=error)

    if criterion.expression is not None:
        return _expression(criterion, names, outcome), None
    if goal.evaluator is None:
        return outcome("unscored", reasoning="no evaluator"), None
    provider = providers(goal.evaluator)
    if provider is None:
        return failed(f"no provider {goal.evaluator!r}"), None
    request = LlmRequest(
        messages=[ChatMessage(role="user", content=_prompt(goal, criterion, memory))],
        system=OUTCOME_SYSTEM_PROMPT,
        max_tokens=512,
        temperature=0.0,
        json_response=True,
        purpose="outcome",
    )
    # Each call's tokens as it returns: a cut answer's too when asking once more fails.
    meter = Meter()
    try:
        with asked_at("goal", item=ident):
            # A cut answer is no score: asked once more, then a TruncatedError (unscored).
            response = await complete_uncut(MeteredProvider(provider, meter), request)
    except ProviderError as exc:
        return failed(f"the evaluator failed: {exc}"), meter.usage
    except Exception as exc:  # a provider's own bug: still a check that did not run
        return failed(f"the evaluator failed: {type(exc).__name__}: {exc}"), meter.usage
    score_or_none, reasoning = parse_score(response.text)
    if score_or_none is None:
        return failed(f"the evaluator gave no score ({reasoning})"), meter.usage
    scored = outcome(
        "model",
        score=score_or_none,
        met=score_or_none >= criterion.threshold,
        reasoning=reasoning,
    )
    return scored, meter.usage


def _expression(
    criterion: SuccessCriterion,
    names: Mapping[str, Any],
    outcome: Callable[..., CriterionOutcome],
) -> CriterionOutcome:
    """A criterion with an ``expression``, scored over the final memory."""
    assert criterion.expression is not None
    try:
        value = compile_expression(criterion.expression, kinds=False).evaluate(names)
    except ExpressionError as exc:
        return outcome("expression", score=0.0, met=False, reasoning=str(exc))
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            score = 1.0 if value else 0.0
        except Exception as exc:  # truthiness of a foreign value
            return outcome("expression", score=0.0, met=False, reasoning=repr(exc))
    elif 0.0 <= float(value) <= 1.0:
        score = float(value)
    else:
        return outcome(
            "expression",
            score=0.0,
            met=False,
            reasoning=f"{criterion.expression} gave {value!r}, not a score in 0..1",
        )
    return outcome(
        "expression",
        score=score,
        met=score >= criterion.threshold,
        reasoning=f"{criterion.expression} gave {_short(value)}",
    )


def _constraint(index: int, item: str | Constraint, names: Mapping[str, Any]) -> ConstraintOutcome:
    ident = constraint_id(item, index)
    if isinstance(item, str) or item.expression is None:
        description = item if isinstance(item, str) else item.description
        return ConstraintOutcome(id=ident, description=description, method="unchecked")
    try:
        held = bool(compile_expression(item.expression, kinds=False).evaluate(names))
        reasoning = f"{item.expression} is {'true' if held else 'false'}"
    except ExpressionError as exc:
        held, reasoning = False, str(exc)
    except Exception as exc:  # truthiness of a foreign value
        held, reasoning = False, repr(exc)
    return ConstraintOutcome(
        id=ident, description=item.description, method="expression", held=held, reasoning=reasoning
    )


def _prompt(goal: Goal, criterion: SuccessCriterion, memory: Mapping[str, Any]) -> str:
    results = json.dumps(plain(dict(memory)), ensure_ascii=False, indent=1, default=repr)
    if len(results) > _MAX_MEMORY_CHARS:
        results = results[:_MAX_MEMORY_CHARS] + "\n[... cut: the results are longer]"
    return (
        f"Goal: {goal.description}\n\nSuccess criterion: {criterion.description}\n\n"
        f"Final results (the job's memory):\n{results}\n\nScore the criterion from 0 to 1."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def score_goal(
    goal: Goal, state: RunState, status: str, quality: str, *, providers: ProviderLookup
) -> ScoredGoal:
    """The scorecard of a run ending with ``status`` and ``quality``, as RunFinished holds
    it, with the tokens its evaluator's calls cost.

    The expressions see the run's final memory and ``run``: ``status``, ``quality``,
    ``total_retries``, ``steps`` and ``path``.
    """
    run = {
        "status": status,
        "quality": quality,
        "total_retries": state.total_retries,
        "steps": state.steps,
        "path": list(state.path),
    }
    outcome, usage = await evaluate_goal(goal, memory=state.memory, run=run, providers=providers)
    data: dict[str, Any] = msgspec.to_builtins(outcome)
    return ScoredGoal(outcome=data, usage=usage)
