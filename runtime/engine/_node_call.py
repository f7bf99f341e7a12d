"""Calling a plain node's callable (in a worker thread for a plain ``def``) and checking
what it returns."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from types import CoroutineType
from typing import Any

from ..control._threads import run_in_thread
from ..events._values import check_memory_value
from ..spec._model import NodeSpec
from ._messages import ExecuteNode
from ._runlog import RunLog

__all__ = [
    "OutputKeysError",
    "PlainFunction",
    "as_coroutine",
    "call_node",
    "checked_outputs",
]


def call_node(
    plain: PlainFunction, message: ExecuteNode, context: object | None, log: RunLog
) -> Awaitable[Any]:
    """What to await for the node's return value: an async callable's own coroutine, or
    a plain def in a worker thread (it may block: I/O, CPU; cancellation or the deadline
    abandons the thread instead of waiting). ``context``: the node's NodeContext, if it
    takes one."""
    if plain.is_async:
        function = plain.function
        result: Any = (
            function(message.inputs) if context is None else function(message.inputs, context)
        )
        if type(result) is CoroutineType or inspect.isawaitable(result):
            return result
        return _ready(result)  # an "async" callable object that returned a value
    args: tuple[Any, ...] = (message.inputs,) if context is None else (message.inputs, context)
    return _in_thread(functools.partial(plain.function, *args), log, message)


async def _ready(value: Any) -> Any:
    return value


async def as_coroutine(awaitable: Awaitable[Any]) -> Any:
    """A coroutine awaiting ``awaitable`` (for a task of its own)."""
    return await awaitable


async def _in_thread(call: Callable[[], Any], log: RunLog, message: ExecuteNode) -> Any:
    hooks = log.run_hooks
    result = await run_in_thread(call, None if hooks is None else hooks.drain(message.node_id))
    if type(result) is not dict and inspect.isawaitable(result):
        result = await result  # a plain def that returned an awaitable
    return result


class OutputKeysError(KeyError):
    """A node's outputs do not match its ``output_keys`` (an undeclared or a missing key).

    A KeyError whose message reads as a sentence: ``str()`` does not quote it as a key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def checked_outputs(spec: NodeSpec, result: Any) -> dict[str, Any]:
    """The node's outputs (a copy) if ``result`` is a valid return value, else raise."""
    if result is None:
        result = {}  # no outputs: still checked against output_keys below
    if type(result) is not dict and not isinstance(result, Mapping):
        raise TypeError(
            f"node {spec.id!r} returned {type(result).__name__}; "
            "a node returns a mapping of output keys (or None)"
        )
    outputs = dict(result)
    declared = spec.output_keys
    undeclared = False
    for key, value in outputs.items():
        if type(key) is not str:
            raise TypeError(f"node {spec.id!r} returned a {type(key).__name__} output key {key!r}")
        check_memory_value(key, value)
        if declared and key not in declared:
            undeclared = True
    if undeclared:
        extra = sorted(set(outputs) - set(declared))
        raise OutputKeysError(f"node {spec.id!r} returned undeclared output keys: {extra}")
    if len(outputs) < len(declared):  # only declared keys: some are missing
        missing = [k for k in declared if k not in outputs and k not in spec.nullable_keys]
        if missing:
            raise OutputKeysError(f"node {spec.id!r} did not return output keys: {missing}")
    return outputs


class PlainFunction:
    """A resolved node callable, whether it takes a NodeContext and whether it is async
    (computed once)."""

    __slots__ = ("function", "is_async", "wants_context")

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.wants_context = _arity(function) >= 2
        self.is_async = _is_async(function)


def _is_async(function: Callable[..., Any]) -> bool:
    while isinstance(function, functools.partial):
        function = function.func
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004  (a callable object's method)
    return inspect.iscoroutinefunction(call)


def _arity(function: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 2
    return sum(1 for p in parameters if p.kind in positional)
