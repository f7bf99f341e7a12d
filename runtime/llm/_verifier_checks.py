"""The verifier's deterministic checks: an expression over memory, a JSONPath assertion.

Each check returns a :class:`VerificationResult`; a check that cannot run (an expression
that cannot be evaluated) raises :class:`CheckFailed`, which fails the verifier node
instead of giving a verdict. The ``llm_judge`` check, a model call, is the node actor's
(see ``_verifier``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from .._errors import ExpressionError, MemoryValueError
from ..events._catalogue import PaidUsage
from ..events._values import check_memory_value
from ..spec._expr import compile_expression
from ..spec._verifier import (
    AssertionOp,
    ExpressionVerifier,
    JsonPathAssertion,
    JsonPathVerifier,
    VerificationResult,
)

__all__ = [
    "REGEX_TIMEOUT_S",
    "CheckFailed",
    "assert_matches",
    "now",
    "plain",
    "short",
    "storable",
    "verify_expression",
    "verify_jsonpath",
]

#: Seconds one ``matches`` regex may run on one match before the check fails.
REGEX_TIMEOUT_S: Final = 0.1


class CheckFailed(Exception):
    """The check could not run: the node fails with ``error_type`` (``usage``: what the
    evaluator call that failed cost, when it was paid for, which the failure records)."""

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        retryable: bool = False,
        usage: PaidUsage | None = None,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.retryable = retryable
        self.usage = usage


def now() -> str:
    """The current UTC time as a result's ``evaluated_at`` records it."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def verify_expression(
    config: ExpressionVerifier, memory: Mapping[str, Any], goal: Any
) -> VerificationResult:
    """Evaluate the expression over ``memory`` and ``goal`` (see ExpressionVerifier).

    Raises ``CheckFailed`` (ExpressionError) when it cannot be evaluated.
    """
    names = {**memory, "memory": dict(memory), "goal": goal}
    try:
        value = compile_expression(config.expression, kinds=False).evaluate(names)
        passed = bool(value)
    except ExpressionError as exc:
        raise CheckFailed("ExpressionError", str(exc)) from exc
    except Exception as exc:  # bool() of a foreign value: the expression's fault, said so
        raise CheckFailed("ExpressionError", f"{config.expression!r}: {exc}") from exc
    return VerificationResult(
        type="expression",
        passed=passed,
        reasoning=f"{config.expression} is {'truthy' if passed else 'falsy'}",
        extracted_value=storable(plain(value)),
        evaluated_at=now(),
    )


def storable(value: Any) -> Any:
    """``value``, or its short repr when the log cannot hold it unchanged (an overflowed
    float is infinite): the result reads the same live and from the log."""
    try:
        check_memory_value("extracted_value", value)
    except MemoryValueError:
        return short(value)
    return value


def verify_jsonpath(config: JsonPathVerifier, memory: Mapping[str, Any]) -> VerificationResult:
    """Query ``memory[target_key]`` with the path, then check the assertion on the matches."""
    assertion = config.assertion
    assert assertion is not None  # validation guarantees it

    def result(passed: bool, reasoning: str, values: list[Any] | None) -> VerificationResult:
        return VerificationResult(
            type="jsonpath",
            passed=passed,
            reasoning=reasoning,
            extracted_value=values,
            evaluated_at=now(),
        )

    if config.target_key not in memory:
        return result(False, f"memory key {config.target_key!r} is not set", None)
    import jsonpath_rfc9535  # imported when a jsonpath verifier runs

    try:
        nodes = jsonpath_rfc9535.compile(config.path).find(plain(memory[config.target_key]))
    except jsonpath_rfc9535.JSONPathError as exc:
        return result(False, f"{config.path} cannot be applied: {exc}", None)
    values = [node.value for node in nodes]
    passed, reasoning = assert_matches(assertion, values)
    return result(passed, f"{config.path}: {reasoning}", values)


def assert_matches(assertion: JsonPathAssertion, values: list[Any]) -> tuple[bool, str]:
    """Whether ``assertion`` holds for the matched ``values``, and why (see AssertionOp)."""
    op, operand = assertion.op, assertion.value
    if op == "exists":
        return (bool(values), f"{len(values)} match(es)")
    if op == "not_exists":
        return (not values, f"{len(values)} match(es)")
    if not values:
        return False, "no match"
    for index, value in enumerate(values):
        ok, why = _holds(op, value, operand)
        if not ok:
            return False, f"match {index} ({short(value)}) fails {op} {short(operand)}: {why}"
    return True, f"all {len(values)} match(es) satisfy {op} {short(operand)}"


def _holds(op: AssertionOp, value: Any, operand: Any) -> tuple[bool, str]:
    if op == "equals":
        return value == operand, "not equal"
    if op == "not_equals":
        return value != operand, "equal"
    if op in ("gt", "gte", "lt", "lte"):
        comparable = (_is_number(value) and _is_number(operand)) or (
            isinstance(value, str) and isinstance(operand, str)
        )
        if not comparable:
            return False, f"a {type(value).__name__} is not comparable with the operand"
        holds = {
            "gt": value > operand,
            "gte": value >= operand,
            "lt": value < operand,
            "lte": value <= operand,
        }[op]
        return holds, "comparison is false"
    if op == "matches":
        if not isinstance(value, str):
            return False, f"a {type(value).__name__} is not a string"
        import regex  # imported when a regex check runs

        try:
            found = regex.search(operand, value, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            return False, f"the regex ran longer than {REGEX_TIMEOUT_S} s"
        return found is not None, "no match of the regex"
    if op == "contains":
        if isinstance(value, str):
            return isinstance(operand, str) and operand in value, "not contained"
        if isinstance(value, list | dict):
            try:
                return operand in value, "not contained"
            except TypeError:  # an unhashable operand tested against an object's keys
                return False, "not contained"
        return False, f"a {type(value).__name__} contains nothing"
    # length_*
    if not isinstance(value, str | list | dict):
        return False, f"a {type(value).__name__} has no length"
    size = len(value)
    holds = {
        "length_equals": size == operand,
        "length_gt": size > operand,
        "length_gte": size >= operand,
        "length_lt": size < operand,
        "length_lte": size <= operand,
    }[op]
    return holds, f"its length is {size}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def plain(value: Any) -> Any:
    """``value`` as JSON-like builtins (what the log would give back anyway)."""
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)
