"""The configuration of a verifier node (``kind: verifier``): a tagged union on ``type``.

A verifier checks a value already in memory and writes a :class:`VerificationResult` to
``result_key`` (default ``<node id>_verification``) and a flat boolean to
``<result_key>_passed``, so edges can route on it. Three checks:

- :class:`ExpressionVerifier` (``type: expression``): the safe expression language over
  ``memory`` and ``goal`` (and the memory keys by name); passes when truthy.
- :class:`JsonPathVerifier` (``type: jsonpath``): an RFC 9535 JSONPath query on memory key
  ``target_key``, then a :class:`JsonPathAssertion` that every match must satisfy.
- :class:`LlmJudgeVerifier` (``type: llm_judge``): an evaluator model scores
  ``target_key`` from 0 to 1 against ``evaluation_criteria``; passes at ``pass_threshold``.

Fields every variant has: ``result_key`` and ``throw_on_fail`` (True: a failed check fails
the node, so its retry policy and ``on_failure`` edges apply; False, the default: the node
succeeds and edges route on ``<result_key>_passed``).

This module holds the spec types and their validation (:func:`check_verifier`); running
a verifier is ``_verifier``'s job.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import msgspec

from .._errors import ExpressionError, SpecError
from ._expr import compile_expression

__all__ = [
    "AssertionOp",
    "ExpressionVerifier",
    "JsonPathAssertion",
    "JsonPathVerifier",
    "LlmJudgeVerifier",
    "VerificationResult",
    "VerifierSpec",
    "check_verifier",
    "result_keys",
]

#: The assertions of a jsonpath verifier. ``exists``/``not_exists`` look at the number of
#: matches; every other op must hold for every match (and there must be one).
AssertionOp = Literal[
    "exists",
    "not_exists",
    "equals",
    "not_equals",
    "gt",
    "gte",
    "lt",
    "lte",
    "matches",
    "contains",
    "length_equals",
    "length_gt",
    "length_gte",
    "length_lt",
    "length_lte",
]

#: Longest regex a ``matches`` assertion accepts (its running time is bounded separately).
MAX_PATTERN_LENGTH: Final = 1_000
_LENGTH_OPS: Final = ("length_equals", "length_gt", "length_gte", "length_lt", "length_lte")


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Frozen, keyword-only, unknown fields refused (as every spec struct)."""


class _Verifier(_Config, frozen=True, tag_field="type"):
    result_key: str | None = None
    throw_on_fail: bool = False

    @property
    def type(self) -> Literal["expression", "jsonpath", "llm_judge"]:
        """The variant's tag, as spec files write it."""
        tag: Any = self.__struct_config__.tag
        return tag  # type: ignore[no-any-return]


class ExpressionVerifier(_Verifier, frozen=True, tag="expression"):
    """Passes when ``expression`` is truthy.

    The expression sees ``memory`` (the node's inputs: its ``input_keys``, or all of
    memory when it declares none), ``goal`` (the graph's goal as a mapping, or None) and
    each memory key by its name: ``len(memory["draft"]) > 280`` or ``length(draft) > 280``.
    An expression that cannot be evaluated (a missing key, a type error) fails the node
    with an ExpressionError: a typo must not read as a failed check.
    """

    expression: str = ""


class JsonPathAssertion(_Config, frozen=True):
    """``op`` applied to each match with operand ``value`` (see :data:`AssertionOp`).

    ``equals``/``not_equals`` compare with ``==``; ``gt``/``gte``/``lt``/``lte`` compare
    numbers with numbers or strings with strings; ``matches`` searches a string match for
    the regex ``value``; ``contains``: a string match contains ``value`` as a substring, a
    list has it as an item, an object as a key; ``length_*`` compare the length of a
    string, list or object with the integer ``value``.
    """

    op: AssertionOp
    value: Any = None


class JsonPathVerifier(_Verifier, frozen=True, tag="jsonpath"):
    """Queries memory key ``target_key`` with ``path`` (RFC 9535), then asserts."""

    target_key: str = ""
    path: str = ""
    assertion: JsonPathAssertion | None = None


class LlmJudgeVerifier(_Verifier, frozen=True, tag="llm_judge"):
    """An evaluator model scores ``target_key`` in 0..1 against ``evaluation_criteria``.

    ``evaluator`` names a provider registered with ``Runtime(providers=...)``; None uses
    the runtime's ``provider``. ``model`` overrides that provider's default model. The
    reply may be JSON (``{"score": 0.9, "reasoning": "..."}``) or text holding a number
    (``0.9``, ``9/10``, ``90%``); a reply with no score in 0..1 is a failed verification
    whose reasoning says why, never a crash, and a check that did not run (a judge failure
    of kind ``verify``: a completed run is at best degraded).
    """

    target_key: str = ""
    evaluation_criteria: str = ""
    pass_threshold: float = 0.8
    evaluator: str | None = None
    model: str | None = None


VerifierSpec = ExpressionVerifier | JsonPathVerifier | LlmJudgeVerifier
"""A verifier node's configuration: one of the three variants, told apart by ``type``."""


class VerificationResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a verifier concluded, as written to ``result_key`` (as a plain mapping).

    ``score`` and ``threshold`` are set by ``llm_judge``; ``extracted_value`` is the
    expression's value, the list of JSONPath matches, or the evaluator's raw reply;
    ``evaluated_at`` is an ISO 8601 UTC timestamp.
    """

    type: Literal["expression", "jsonpath", "llm_judge"]
    passed: bool
    reasoning: str
    score: float | None = None
    threshold: float | None = None
    extracted_value: Any = None
    evaluated_at: str = ""


def result_keys(node_id: str, spec: VerifierSpec) -> tuple[str, str]:
    """``(result_key, passed_key)`` the verifier of node ``node_id`` writes."""
    key = spec.result_key or f"{node_id}_verification"
    return key, f"{key}_passed"


def check_verifier(
    where: str, node_id: str, output_keys: list[str], spec: VerifierSpec, *, lint: bool = True
) -> list[SpecError]:
    """Validation problems of a verifier node's configuration, each naming its field.

    ``where`` is the node's path (``nodes[3]``); the config is at ``<where>.verifier``.
    ``lint``: with the expression's kind check (see ``compile_expression``).
    """
    path = f"{where}.verifier"
    errors: list[SpecError] = []
    for key in result_keys(node_id, spec):
        if key not in output_keys:
            errors.append(
                SpecError(
                    f"{where}.output_keys",
                    f"the verifier writes {key!r}: list it in output_keys",
                )
            )
    if spec.result_key is not None and not spec.result_key:
        errors.append(SpecError(f"{path}.result_key", "must not be empty"))
    if isinstance(spec, ExpressionVerifier):
        if not spec.expression.strip():
            errors.append(
                SpecError(f"{path}.expression", "an expression verifier needs 'expression'")
            )
        else:
            try:
                compile_expression(spec.expression, kinds=lint)
            except ExpressionError as exc:
                column = f" (column {exc.position})" if exc.position is not None else ""
                errors.append(
                    SpecError(
                        f"{path}.expression",
                        f"invalid expression {spec.expression!r}{column}: {exc.reason}",
                    )
                )
    elif isinstance(spec, JsonPathVerifier):
        if not spec.target_key:
            errors.append(SpecError(f"{path}.target_key", "a jsonpath verifier needs 'target_key'"))
        errors.extend(_check_path(f"{path}.path", spec.path))
        if spec.assertion is None:
            errors.append(SpecError(f"{path}.assertion", "a jsonpath verifier needs 'assertion'"))
        else:
            errors.extend(_check_assertion(f"{path}.assertion", spec.assertion))
    else:
        if not spec.target_key:
            errors.append(
                SpecError(f"{path}.target_key", "an llm_judge verifier needs 'target_key'")
            )
        if not spec.evaluation_criteria.strip():
            errors.append(
                SpecError(
                    f"{path}.evaluation_criteria",
                    "an llm_judge verifier needs 'evaluation_criteria'",
                )
            )
        if not 0.0 <= spec.pass_threshold <= 1.0:  # also refuses NaN
            errors.append(
                SpecError(
                    f"{path}.pass_threshold",
                    f"must be between 0 and 1, got {spec.pass_threshold}",
                )
            )
        if spec.evaluator is not None and not spec.evaluator:
            errors.append(SpecError(f"{path}.evaluator", "must not be empty"))
    return errors


def _check_path(where: str, path: str) -> list[SpecError]:
    if not path:
        return [SpecError(where, "a jsonpath verifier needs 'path'")]
    import jsonpath_rfc9535  # imported when a graph uses a jsonpath verifier

    try:
        jsonpath_rfc9535.compile(path)
    except jsonpath_rfc9535.JSONPathError as exc:
        return [SpecError(where, f"invalid JSONPath {path!r}: {exc}")]
    return []


def _check_assertion(where: str, assertion: JsonPathAssertion) -> list[SpecError]:
    op, value = assertion.op, assertion.value
    if op in ("exists", "not_exists"):
        if value is not None:
            return [SpecError(f"{where}.value", f"{op!r} takes no value")]
        return []
    if op == "matches":
        if not isinstance(value, str):
            return [SpecError(f"{where}.value", "'matches' needs a regex string")]
        if len(value) > MAX_PATTERN_LENGTH:
            return [
                SpecError(
                    f"{where}.value", f"a regex may have at most {MAX_PATTERN_LENGTH} characters"
                )
            ]
        import regex  # imported when a graph uses a regex check

        try:
            regex.compile(value)
        except regex.error as exc:
            return [SpecError(f"{where}.value", f"invalid regex {value!r}: {exc}")]
        return []
    if op in _LENGTH_OPS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return [SpecError(f"{where}.value", f"{op!r} needs a non-negative integer")]
        return []
    if op in ("gt", "gte", "lt", "lte"):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value)) and not isinstance(value, str):
            return [SpecError(f"{where}.value", f"{op!r} needs a finite number or a string")]
    return []
