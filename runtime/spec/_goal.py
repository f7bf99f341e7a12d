"""The goal's checklist: success criteria and constraints, and what their scoring gives.

A goal's ``success_criteria`` and ``constraints`` are plain strings (guidance shown to
every LLM node) or objects that can also be measured at the end of a run:

- :class:`SuccessCriterion` with an ``expression`` is scored deterministically; one
  without is scored by the goal's ``evaluator`` model when the goal names one, and is
  left unscored otherwise;
- :class:`Constraint` with an ``expression`` is checked (it must hold at the end);
  one without is guidance only.

The outcome (:class:`GoalOutcome`) is measurement only: it never changes the run's path or
status; an evaluator call that failed is a check that did not run, so a completed run is
then at best "degraded" (``CriterionOutcome.error``). ``_goals`` computes it; this module
holds the types and validation.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._errors import ExpressionError, SpecError
from ._expr import compile_expression

__all__ = [
    "Constraint",
    "ConstraintOutcome",
    "CriterionOutcome",
    "GoalOutcome",
    "SuccessCriterion",
    "check_goal_items",
]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Frozen, keyword-only, unknown fields refused (as every spec struct)."""


class SuccessCriterion(_Config, frozen=True):
    """One item of the goal's final checklist.

    ``expression`` (the safe expression language) scores it without a model: True is 1,
    False is 0, a number in 0..1 is the score itself. Names: the memory keys, ``memory``,
    ``goal``, and ``run`` (``status``, ``quality``, ``total_retries``, ``steps``,
    ``path``). Without one, the goal's ``evaluator`` scores it from the final memory.
    It is met when its score is at least ``threshold``. ``weight`` counts it in the
    overall score; ``id`` names it in the scorecard (default ``criterion_<index>``).
    """

    description: str
    id: str = ""
    expression: str | None = None
    weight: float = 1.0
    threshold: float = 0.8


class Constraint(_Config, frozen=True):
    """A rule the whole job must respect; ``expression``, if set, must hold at the end."""

    description: str
    id: str = ""
    expression: str | None = None


class CriterionOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How one criterion scored. ``method``: expression, model, or unscored.

    ``error`` says why a criterion the goal's evaluator was to score was not (its call
    failed, its reply had no score, no such provider): a check that did not run, which
    leaves a completed run at best "degraded". None otherwise (left unscored because the
    goal has no evaluator is not an error).
    """

    id: str
    description: str
    method: Literal["expression", "model", "unscored"]
    score: float | None = None
    met: bool | None = None
    weight: float = 1.0
    reasoning: str = ""
    error: str | None = None


class ConstraintOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """Whether one constraint held. ``method``: expression, or unchecked (guidance)."""

    id: str
    description: str
    method: Literal["expression", "unchecked"]
    held: bool | None = None
    reasoning: str = ""


class GoalOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The goal scorecard of one run, recorded in RunFinished.goal_outcome.

    ``score`` is the weighted mean of the scored criteria (None when none was scored);
    ``met`` is True when every scored criterion is met and every checked constraint
    held, None when nothing was scored or checked.
    """

    score: float | None
    met: bool | None
    criteria: list[CriterionOutcome] = []
    constraints: list[ConstraintOutcome] = []
    evaluated_at: str = ""


def criterion_id(item: str | SuccessCriterion, index: int) -> str:
    if isinstance(item, SuccessCriterion) and item.id:
        return item.id
    return f"criterion_{index}"


def constraint_id(item: str | Constraint, index: int) -> str:
    if isinstance(item, Constraint) and item.id:
        return item.id
    return f"constraint_{index}"


def check_goal_items(
    criteria: list[str | SuccessCriterion],
    constraints: list[str | Constraint],
    *,
    lint: bool = True,
) -> list[SpecError]:
    """Validation problems of a goal's criteria and constraints, each naming its field
    (``lint``: with the expressions' kind check, see ``compile_expression``)."""
    errors: list[SpecError] = []
    seen: set[str] = set()
    for i, criterion in enumerate(criteria):
        where = f"goal.success_criteria[{i}]"
        ident = criterion_id(criterion, i)
        if ident in seen:
            errors.append(SpecError(f"{where}.id", f"duplicate criterion id {ident!r}"))
        seen.add(ident)
        if isinstance(criterion, str):
            continue
        if not criterion.description.strip():
            errors.append(SpecError(f"{where}.description", "must not be empty"))
        if not (criterion.weight >= 0 and criterion.weight <= 1e6):  # also refuses NaN
            errors.append(
                SpecError(f"{where}.weight", f"must be in 0..1e6, got {criterion.weight}")
            )
        if not 0.0 <= criterion.threshold <= 1.0:
            errors.append(
                SpecError(
                    f"{where}.threshold", f"must be between 0 and 1, got {criterion.threshold}"
                )
            )
        errors.extend(_check_expression(f"{where}.expression", criterion.expression, lint))
    seen = set()
    for i, constraint in enumerate(constraints):
        where = f"goal.constraints[{i}]"
        ident = constraint_id(constraint, i)
        if ident in seen:
            errors.append(SpecError(f"{where}.id", f"duplicate constraint id {ident!r}"))
        seen.add(ident)
        if isinstance(constraint, Constraint):
            errors.extend(_check_expression(f"{where}.expression", constraint.expression, lint))
    return errors


def _check_expression(where: str, source: str | None, lint: bool) -> list[SpecError]:
    if source is None:
        return []
    try:
        compile_expression(source, kinds=lint)
    except ExpressionError as exc:
        return [SpecError(where, f"invalid expression {source!r}: {exc.reason}")]
    return []


def plain(value: Any) -> Any:
    """``value`` as JSON-like builtins, or its repr when it has none."""
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)
