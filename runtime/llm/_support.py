"""Pieces of the LLM node that need no actor: the set_output tool, custom judge lookup,
and how data is shown to the model."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from .._errors import MemoryValueError, SpecError
from ..events._values import check_memory_value
from ..providers._base import ToolCall, ToolSpec
from ..spec._imports import import_reference
from ._verdict import CustomJudgeResult, JudgeContext, JudgeProtocol

__all__ = ["SET_OUTPUT", "apply_set_output", "listing", "resolve_judge", "set_output_spec"]

#: The name of the built-in tool that fills the node's output accumulator.
SET_OUTPUT = "set_output"


def set_output_spec(output_keys: Sequence[str], nullable_keys: Sequence[str] = ()) -> ToolSpec:
    """The ``set_output(key, value)`` tool as the model sees it; ``key`` is an enum."""
    nullable = [k for k in output_keys if k in nullable_keys]
    note = f" These keys may be set to null: {', '.join(nullable)}." if nullable else ""
    return ToolSpec(
        name=SET_OUTPUT,
        description=(
            "Record one output of the current task. Call it once per output key when the "
            f"value is ready; a later call for the same key replaces the value.{note}"
        ),
        parameters={
            "type": "object",
            "properties": {
                "key": {"type": "string", "enum": list(output_keys)},
                "value": {"description": "The output value (any JSON value)."},
            },
            "required": ["key", "value"],
        },
    )


class _FunctionJudge:
    """Adapts a plain (async or sync) function of a JudgeContext to JudgeProtocol."""

    def __init__(self, function: Callable[[JudgeContext], Any]) -> None:
        self.function = function

    async def evaluate(self, context: JudgeContext) -> CustomJudgeResult:
        result = self.function(context)
        if inspect.isawaitable(result):
            result = await result
        verdict: CustomJudgeResult = result  # rule() checks what it really is
        return verdict


def resolve_judge(
    reference: str,
    judges: Mapping[str, JudgeProtocol],
    *,
    path: str,
    allow_imports: Sequence[str] = (),
) -> JudgeProtocol:
    """The custom judge ``NodeSpec.judge`` names: a registered name, else a ``"module:attr"``
    path under one of ``allow_imports`` (see ``import_reference``; none by default).

    An imported attribute may be a judge object (with ``evaluate``), a class (instantiated
    without arguments) or a function of the context (wrapped). Raises SpecError naming
    ``path`` when it cannot be found, is not allowed or is not a judge.
    """
    if reference in judges:
        return judges[reference]
    target: Any = import_reference(reference, allow_imports, path=path, what="judge")
    if isinstance(target, type):
        target = _instantiate(target, reference, path)
    if callable(getattr(target, "evaluate", None)):
        judge: JudgeProtocol = target
        return judge
    if callable(target):
        return _FunctionJudge(target)
    raise SpecError(path, f"{reference!r} is not a judge (no evaluate method, not callable)")


def _instantiate(cls: type, reference: str, path: str) -> Any:
    """An instance of the judge class ``cls``, made without arguments; SpecError naming
    ``path`` when it needs some or its constructor fails."""
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise SpecError(
            path,
            f"judge class {reference!r} needs constructor arguments ({exc}); register an "
            "instance with Runtime(judges={...}) instead",
        ) from None
    except ValueError:
        pass  # no signature to inspect (a builtin): the call below says
    try:
        return cls()
    except Exception as exc:
        raise SpecError(
            path, f"judge class {reference!r} could not be made: {type(exc).__name__}: {exc}"
        ) from exc


def apply_set_output(
    call: ToolCall, output_keys: Sequence[str]
) -> tuple[str, bool, tuple[str, Any] | None]:
    """Check one ``set_output`` call: ``(result text, is_error, (key, value) or None)``.

    A key outside ``output_keys``, malformed arguments or a value the log would not store
    unchanged (NaN, a lone surrogate: see ``check_memory_value``) give an error result for
    the model to read and correct; nothing is set then.
    """
    args = call.arguments
    key = args.get("key")
    if set(args) - {"key", "value"} or "value" not in args or not isinstance(key, str):
        return (
            'ToolArgumentsError: set_output takes exactly two arguments, "key" (a string) '
            'and "value"',
            True,
            None,
        )
    if key not in output_keys:
        keys = ", ".join(output_keys)
        return f"ToolArgumentsError: {key!r} is not an output key; use one of: {keys}", True, None
    try:
        check_memory_value(key, args["value"])
    except MemoryValueError as exc:
        return f"ToolArgumentsError: {exc}", True, None
    return f"Output {key!r} set.", False, (key, args["value"])


def render(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return msgspec.json.encode(value, order="sorted").decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def listing(title: str, data: Mapping[str, Any]) -> str:
    return "\n".join([title, *(f"- {key}: {render(value)}" for key, value in data.items())])
