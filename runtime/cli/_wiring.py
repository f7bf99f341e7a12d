"""What a graph file needs to run from the command line: a model provider and its tools.

Functions and judges in a graph file are import paths (``"package.module:attr"``), which
the runtime resolves itself. Tools are named in ``NodeSpec.tools``: a name with a colon is
an import path too, resolved here (a :class:`runtime.Tool`, or a plain function that
becomes one); ``--tools MODULE[:ATTR]`` registers every tool of a module, a list or a
registry under its own name.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable
from contextlib import AsyncExitStack
from typing import Any

from .. import (
    AnthropicProvider,
    GraphSpec,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    OpenAIProvider,
    ProviderError,
    ProviderHTTPError,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolRegistry,
)
from ._common import UsageError, read_file

__all__ = [
    "NoModel",
    "imports_named",
    "load_script",
    "make_provider",
    "tools_from_modules",
]


def _import(reference: str, what: str) -> Any:
    module_name, sep, attribute = reference.partition(":")
    if not module_name.strip():
        raise UsageError(f"{what} {reference!r}: names no module (MODULE or MODULE:ATTR)")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{what} {reference!r}: cannot import {module_name!r}: {exc}") from exc
    if sep:
        for part in attribute.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise UsageError(
                    f"{what} {reference!r}: {module_name} has no {attribute}"
                ) from None
    return target


def imports_named(graph: GraphSpec) -> list[str]:
    """The modules a graph's functions, judges and tools name by import path."""
    references = [node.function for node in graph.nodes if node.function]
    references += [node.judge for node in graph.nodes if node.judge]
    references += [name for node in graph.nodes for name in node.tools]
    modules = {ref.partition(":")[0] for ref in references if ":" in ref}
    return sorted(m for m in modules if m)


def tools_from_modules(references: Iterable[str]) -> ToolRegistry:
    """A registry holding the tools that ``--tools`` names.

    ``MODULE`` registers every :class:`Tool` defined at the module's top level;
    ``MODULE:ATTR`` a Tool, a plain function, a ToolRegistry or a list of tools. (Tools a
    graph file names by ``"module:attr"`` are the runtime's to import, under
    ``allow_imports``.)
    """
    registry = ToolRegistry()
    for reference in references:
        target = _import(reference, "--tools")
        if ":" not in reference:
            items: list[Any] = [v for v in vars(target).values() if isinstance(v, Tool)]
        elif isinstance(target, Tool) or (callable(target) and not isinstance(target, type)):
            items = [target]
        elif isinstance(target, (ToolRegistry, list, tuple)):
            items = list(target)
        else:
            raise UsageError(
                f"--tools {reference!r}: a {type(target).__name__}, not a Tool, a function, "
                "a ToolRegistry or a list of tools"
            )
        for item in items:
            try:
                registry.register(item, replace=True)
            except (TypeError, ValueError) as exc:
                raise UsageError(f"--tools {reference!r}: {exc}") from exc
    return registry


def _call(raw: Any, where: str) -> ToolCall:
    if not isinstance(raw, dict) or "name" not in raw:
        raise UsageError(f"{where}: a tool call needs at least a 'name'")
    arguments = raw.get("arguments", {})
    if not isinstance(arguments, dict):
        raise UsageError(f"{where}: 'arguments' must be an object")
    # A default id the APIs accept ([a-zA-Z0-9_-]+): "call_turns_0_tool_calls_1".
    default = re.sub(r"[^a-zA-Z0-9_-]+", "_", f"call_{where}").strip("_")
    return ToolCall(id=str(raw.get("id") or default), name=str(raw["name"]), arguments=arguments)


def _entry(raw: Any, where: str) -> LlmResponse | str | ProviderError:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: an entry is a text or an object, not {type(raw).__name__}")
    if "error" in raw:
        status = raw.get("status")
        if status is not None:
            return ProviderHTTPError("scripted", str(raw["error"]), status=int(status))
        return ProviderError("scripted", str(raw["error"]))
    calls = [_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(raw.get("tool_calls", []))]
    return LlmResponse(
        text=str(raw.get("text", "")),
        tool_calls=calls,
        model="scripted",
        stop_reason="tool_use" if calls else "end_turn",
        stop="tool_use" if calls else "end",
    )


def load_script(path: str) -> ScriptedProvider:
    """A :class:`ScriptedProvider` from a JSON or YAML file.

    The file holds a list of entries (the answers, in order) or an object with ``turns``
    and optionally ``judge`` and ``router`` lists (answers to those purposes). An entry is
    a text, an object ``{text, tool_calls: [{name, arguments, id}]}``, or
    ``{error, status}`` to make that call fail. The file is read by the rules graph files
    are read by (no key twice, no NaN, YAML 1.2 numbers). Raises UsageError for a bad file.
    """
    data = read_file(path, f"script {path}")
    lanes = {"turns": data} if isinstance(data, list) else data
    if not isinstance(lanes, dict) or not isinstance(lanes.get("turns", []), list):
        raise UsageError(f"script {path}: expected a list of entries or an object with 'turns'")
    unknown = set(lanes) - {"turns", "judge", "router"}
    if unknown:
        raise UsageError(f"script {path}: unknown sections {sorted(unknown)}")

    def lane(name: str) -> list[LlmResponse | str | ProviderError] | None:
        if name not in lanes:
            return None
        entries = lanes[name]
        if not isinstance(entries, list):
            raise UsageError(f"script {path}: '{name}' must be a list")
        return [_entry(e, f"{name}[{i}]") for i, e in enumerate(entries)]

    return ScriptedProvider(lane("turns") or [], judge=lane("judge"), router=lane("router"))


class NoModel:
    """The provider of a command that calls no model: every call fails, saying why."""

    name = "none"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise ProviderError(self.name, "no model is configured: pass --provider")


def _needs_model(graph: GraphSpec | None, start: Iterable[str] | None) -> bool:
    """Whether a model may be called running ``graph`` from ``start`` (None: the entry)."""
    if graph is None:
        return True
    nodes = {node.id: node for node in graph.nodes}
    todo = list(start) if start is not None else [graph.entry_node]
    seen: set[str] = set()
    while todo:
        node_id = todo.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        node = nodes.get(node_id)
        if node is not None and node.kind == "llm":
            return True
        if node is not None and node.verifier is not None and node.verifier.type == "llm_judge":
            return True
        for edge in graph.edges:
            if edge.source == node_id:
                if edge.condition == "llm_decide":
                    return True
                todo.append(edge.target)
    return False


async def make_provider(
    option: str | None,
    graph: GraphSpec | None,
    stack: AsyncExitStack,
    *,
    start: Iterable[str] | None = None,
) -> LlmProvider | None:
    """The provider ``--provider`` names, opened on ``stack``.

    ``openai`` / ``anthropic`` read their usual environment variables (API key, base URL,
    model); ``scripted:FILE`` answers from a script (:func:`load_script`). Without the
    option: None when the graph needs no model, else openai or anthropic when their API key
    is set, else a UsageError.
    """
    if option is None:
        if not _needs_model(graph, start):
            # The runtime wants a provider for any graph with LLM nodes; none of them can
            # run from here, and one that somehow did would fail with this error.
            return NoModel() if graph is not None and _needs_model(graph, None) else None
        if os.environ.get("OPENAI_API_KEY"):
            option = "openai"
        elif os.environ.get("ANTHROPIC_API_KEY"):
            option = "anthropic"
        else:
            raise UsageError(
                "this graph calls a model: give --provider openai|anthropic|scripted:FILE "
                "(or set OPENAI_API_KEY or ANTHROPIC_API_KEY)"
            )
    if option.startswith("scripted:"):
        return load_script(option[len("scripted:") :])
    if option not in ("openai", "anthropic"):
        raise UsageError(f"--provider {option!r}: expected openai, anthropic or scripted:FILE")
    kind = OpenAIProvider if option == "openai" else AnthropicProvider
    try:
        provider: OpenAIProvider | AnthropicProvider = kind()
    except ProviderError as exc:
        key = f"{kind.DEFAULTS.env}_API_KEY"
        if not os.environ.get(key):
            # The library's words name its api_key= argument; here the key comes only from
            # the environment (an option would show it in the process list).
            raise UsageError(
                f"--provider {option}: no API key: set the {key} environment variable"
            ) from exc
        raise UsageError(f"--provider {option}: {exc.reason}") from exc
    await stack.enter_async_context(provider)
    return provider
