"""Tools from Python callables: JSON schema from type hints, validated calls, a registry.

A tool is a plain function (sync or async) whose signature *is* its schema::

    @tool
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict[str, float]:
        \"\"\"Current weather for a city.

        Args:
            city: The city name, e.g. "Lisbon".
            unit: Temperature unit.
        \"\"\"

The model sees :meth:`Tool.spec`; its arguments are validated and converted with
msgspec against the same hints before the function runs (lax: ``"3"`` is accepted for an
``int``), and the return value becomes the tool result text (``str`` as is, anything
else as JSON).
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import anyio
import msgspec

from .._errors import ToolArgumentsError, ToolTimeoutError, UnknownToolError
from ..control._threads import own_failure, run_in_thread
from ..providers._base import TOOL_NAME, ToolCall, ToolSpec
from ._tool_calls import refusal

__all__ = [
    "Tool",
    "ToolRegistry",
    "run_tool_calls",
    "tool",
]


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_OTHER_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and per-argument texts from a Google-style ``Args:`` section."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _SECTION.match(stripped) or _OTHER_SECTION.match(stripped):
            if summary or _SECTION.match(stripped) or _OTHER_SECTION.match(stripped):
                break
            continue
        summary.append(stripped)
    args: dict[str, str] = {}
    in_args = False
    header_indent = 0
    args_indent = 0
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if _SECTION.match(stripped):
            in_args, header_indent, current = True, indent, None
            continue
        if not in_args:
            continue
        if not stripped:
            continue
        if indent <= header_indent:
            break  # the next section ("Returns:", ...) or the end of the block
        match = _ARG_LINE.match(stripped)
        if match and (current is None or indent <= args_indent):
            current, args_indent = match.group(1), indent
            args[current] = match.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), args


def _is_async(fn: Callable[..., Any]) -> bool:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - async callable objects
    return call is not None and inspect.iscoroutinefunction(call)


def _default_of(param: inspect.Parameter) -> Any:
    default = param.default
    if isinstance(default, list | dict | set | bytearray) and default:
        # msgspec refuses mutable defaults; a factory also keeps calls independent.
        return msgspec.field(default_factory=functools.partial(copy.deepcopy, default))
    return default


def _strip_titles(schema: Any) -> Any:
    """Drop msgspec's generated ``title`` keys (noise to a model), keeping property names."""
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


@dataclass(frozen=True, eq=False)
class Tool:
    """A callable the model may use: name, description, JSON schema, and the function.

    Build one with :func:`tool` or :meth:`from_callable`. ``serial`` tools never run
    alongside others in :func:`run_tool_calls` (use it for tools with side effects that
    must not interleave). Calling the Tool object calls the function directly, so a
    decorated function stays usable as a function. A Tool constructed directly, with a
    hand-written ``parameters`` schema, passes the model's arguments to ``fn`` as keyword
    arguments without validation.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    serial: bool = False
    _args_type: Any = field(default=None, repr=False)
    _positional: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        serial: bool = False,
    ) -> Tool:
        """Build a Tool from ``fn``'s signature, type hints and docstring.

        Supported hints: anything msgspec handles (str, int, float, bool, list[T],
        dict[str, T], ``X | None``, Literal, msgspec Structs, TypedDicts, dataclasses).
        Parameters with defaults are optional; unannotated ones accept any JSON value.
        Raises TypeError for ``*args``/``**kwargs``, hints that cannot be resolved, or a
        hint with no JSON schema.
        """
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise TypeError(f"cannot name a tool for {fn!r}: pass name=...")
        doc_summary, doc_args = _parse_docstring(inspect.getdoc(fn) or "")
        try:
            hints = typing.get_type_hints(fn)
        except (NameError, TypeError) as exc:
            raise TypeError(
                f"tool {tool_name!r}: cannot resolve its type hints ({exc}); "
                "types named in string annotations must be importable from its module"
            ) from exc
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        positional: list[str] = []
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"tool {tool_name!r}: *args/**kwargs ({param.name}) have no JSON schema"
                )
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            hint = hints.get(param.name, Any)
            if param.default is param.empty:
                fields.append((param.name, hint))
            else:
                fields.append((param.name, hint, _default_of(param)))
        args_type = msgspec.defstruct(
            f"{tool_name}__arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
        try:
            (ref,), defs = msgspec.json.schema_components(
                [args_type], ref_template="#/$defs/{name}"
            )
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"tool {tool_name!r}: no JSON schema for its arguments: {exc}") from exc
        top_name = ref["$ref"].rsplit("/", 1)[-1]
        schema: dict[str, Any] = dict(defs.pop(top_name))
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        for arg, text in doc_args.items():
            if arg in schema["properties"] and text:
                prop = dict(schema["properties"][arg])
                prop["description"] = text
                schema["properties"][arg] = prop
        if defs:
            schema["$defs"] = defs
        return cls(
            name=tool_name,
            description=description if description is not None else doc_summary,
            parameters=_strip_titles(schema),
            fn=fn,
            serial=serial,
            _args_type=args_type,
            _positional=tuple(positional),
        )

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    async def invoke(self, arguments: dict[str, Any], *, timeout: float | None = None) -> str:
        """Validate ``arguments``, run the function, and return its result as text.

        Arguments that do not fit the signature are not run: the result is the text of
        a :class:`ToolArgumentsError`, for the model to read and correct. Sync functions
        run in a worker thread, async ones in the caller's task. Cancellation, or
        ``timeout`` seconds passing (then :class:`ToolTimeoutError`), abandons a sync
        function's thread instead of waiting for it. Whatever the function raises
        propagates.
        """
        text, _ = await self._run(arguments, catch=False, timeout=timeout)
        return text

    async def execute(
        self, arguments: dict[str, Any], *, timeout: float | None = None
    ) -> tuple[str, bool]:
        """Like :meth:`invoke`, but returns ``(text, is_error)`` for the function's errors.

        Bad arguments and exceptions of the function become error texts
        (``"ValueError: ..."``) with ``is_error`` True. Cancellation and
        :class:`ToolTimeoutError` still propagate.
        """
        return await self._run(arguments, catch=True, timeout=timeout)

    async def _run(
        self, arguments: dict[str, Any], *, catch: bool, timeout: float | None = None
    ) -> tuple[str, bool]:
        if self._args_type is None:
            # Built directly with a hand-written schema: the function gets the raw arguments.
            values = dict(arguments)
        else:
            try:
                parsed = msgspec.convert(arguments, self._args_type, strict=False)
            except msgspec.ValidationError as exc:
                return f"ToolArgumentsError: {ToolArgumentsError(self.name, str(exc))}", True
            values = {f: getattr(parsed, f) for f in self._args_type.__struct_fields__}
        args = [values.pop(p) for p in self._positional]
        call = functools.partial(self.fn, *args, **values)
        result: Any = None
        try:
            with anyio.move_on_after(timeout) as deadline:
                if _is_async(self.fn):
                    try:
                        result = await typing.cast(Awaitable[Any], call())
                    except BaseException as exc:  # sys.exit(), a stray CancelledError...
                        if isinstance(exc, Exception) or (failure := own_failure(exc)) is None:
                            raise
                        raise failure from exc  # the tool's failure, not the run's end
                else:
                    # A blocking tool must not hold up cancellation or the deadline.
                    result = await run_in_thread(call)
        except Exception as exc:
            if not catch:
                raise
            # The model reads the error and may recover; the caller records it.
            return f"{type(exc).__name__}: {exc}", True
        if deadline.cancelled_caught:
            raise ToolTimeoutError(self.name, timeout or 0.0)
        return _to_text(result), False


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, enc_hook=str).decode()


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    serial: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    serial: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a function; works as ``@tool`` and ``@tool(name=...)``."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool.from_callable(f, name=name, description=description, serial=serial)

    return make(fn) if fn is not None else make


class ToolRegistry:
    """Tools by name: what an LLM node looks up with the names in ``NodeSpec.tools``."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, item: Tool | Callable[..., Any], *, replace: bool = False) -> Tool:
        """Add a tool (a plain function is wrapped with :meth:`Tool.from_callable`).

        Returns the Tool, so ``register`` also works as a decorator. A second tool of
        the same name is a ValueError unless ``replace=True``, and so is a name the
        model APIs refuse (``TOOL_NAME``: 1 to 64 letters, digits, ``_`` or ``-``).
        """
        t = item if isinstance(item, Tool) else Tool.from_callable(item)
        if not TOOL_NAME.fullmatch(t.name):
            raise ValueError(
                f"tool name {t.name!r} is refused by the model APIs: use 1 to 64 letters, "
                "digits, '_' or '-'"
            )
        if t.name in self._tools and not replace:
            raise ValueError(f"a tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def alias(self, name: str, tool: Tool) -> None:
        """Make ``tool`` reachable as ``name`` too (the ``"module:attr"`` path a graph
        names it by); it keeps its own name, the one models see and call."""
        self._tools.setdefault(name, tool)

    def get(self, name: str) -> Tool:
        """The tool called ``name``; :class:`UnknownToolError` (a LookupError) if none."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, list(self._tools)) from None

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs of the named tools in the given order (all, in registration order, if None).

        Raises :class:`UnknownToolError` for a name that is not registered.
        """
        chosen = list(self._tools) if names is None else list(names)
        return [self.get(n).spec() for n in chosen]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)


async def run_tool_calls(
    registry: ToolRegistry,
    calls: Sequence[ToolCall],
    *,
    max_concurrency: int | None = None,
    timeout: float | None = None,
) -> list[tuple[ToolCall, str, bool]]:
    """Run a turn's tool calls; return ``(call, result_text, is_error)`` in call order.

    Calls of non-serial tools run concurrently (in one task group, at most
    ``max_concurrency`` at a time when given); then the calls of ``serial`` tools run one
    at a time, in their original order. Never raises for a tool's failure: an unknown
    tool, bad arguments (including arguments a run log cannot store unchanged, such as
    NaN, infinity or a lone surrogate: the tool is not called), or an exception in the
    tool become an error result; a call
    running past ``timeout`` seconds raises :class:`ToolTimeoutError`. Blocks until
    every call finished; cancelling it cancels the calls (sync tools already in a worker
    thread are abandoned, not waited for).
    """
    results: list[tuple[str, bool] | None] = [None] * len(calls)
    limiter = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
    concurrent: list[tuple[int, Tool]] = []
    serial: list[tuple[int, Tool]] = []
    for index, call in enumerate(calls):
        try:
            t = registry.get(call.name)
        except UnknownToolError as exc:
            results[index] = (f"UnknownToolError: {exc}", True)
            continue
        refused = refusal(call)
        if refused is not None:
            results[index] = (refused, True)
            continue
        (serial if t.serial else concurrent).append((index, t))

    timed_out: list[ToolTimeoutError] = []

    async def run_one(index: int, t: Tool) -> None:
        try:
            if limiter is None:
                results[index] = await t.execute(calls[index].arguments, timeout=timeout)
            else:
                async with limiter:
                    results[index] = await t.execute(calls[index].arguments, timeout=timeout)
        except ToolTimeoutError as exc:  # raised once the others are done, not as a group
            timed_out.append(exc)

    if len(concurrent) == 1:
        await run_one(*concurrent[0])
    elif concurrent:
        async with anyio.create_task_group() as tg:
            for index, t in concurrent:
                tg.start_soon(run_one, index, t)
    for index, t in serial:
        if timed_out:
            break
        await run_one(index, t)
    if timed_out:
        raise timed_out[0]
    out: list[tuple[ToolCall, str, bool]] = []
    for call, result in zip(calls, results, strict=True):
        assert result is not None
        out.append((call, result[0], result[1]))
    return out
