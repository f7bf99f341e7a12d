"""magistrate: a runtime for agent graphs whose every step is judged and written down.

Start here::

    async with Runtime("runs.db", functions={...}, provider=...) as rt:
        handle = await rt.start(graph, input={...})
        result = await handle.result()

This face holds what an embedder needs. The rest lives in sub-faces named by concept:
:mod:`runtime.spec` (graph specs, loaders, expressions), :mod:`runtime.events` (the
event catalogue, :class:`~runtime.events.RunState` and ``fold``, the timeline),
:mod:`runtime.providers` (LLM providers and their types), :mod:`runtime.llm` (tools,
judges), :mod:`runtime.observe` (metrics) and :mod:`runtime.testing`.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._config import OwnershipConfig, RecoveryConfig, TimeoutConfig
    from ._errors import (
        ExpressionError,
        MalformedResponseError,
        MemoryValueError,
        NodeError,
        NodeTimeoutError,
        ProviderError,
        ProviderHTTPError,
        ProviderTimeoutError,
        RunChangedError,
        RunDrainingError,
        RunNotFoundError,
        RunStateError,
        SpecError,
        SpecErrors,
        ToolArgumentsError,
        ToolTimeoutError,
        TruncatedError,
        UnknownToolError,
    )
    from ._handle import RunHandle
    from ._result import RunResult, RunStatus
    from ._runtime import Runtime
    from ._worker import run_worker
    from .control._regraph import GraphChangeRefused
    from .control._watch import RunChange
    from .engine import NodeContext
    from .engine._log_hooks import CommitHook
    from .llm import (
        CustomJudgeResult,
        JudgeContext,
        JudgeProtocol,
        JudgeVerdict,
        Tool,
        ToolRegistry,
        tool,
    )
    from .observe import MetricsServer, RuntimeMetrics, default_metrics, serve_metrics
    from .providers import (
        AnthropicProvider,
        ChatMessage,
        LlmProvider,
        LlmRequest,
        LlmResponse,
        OpenAIProvider,
        ProviderSettings,
        ScriptedProvider,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from .replay import Divergence, ReplayReport
    from .spec import (
        EdgeSpec,
        Goal,
        GraphSpec,
        MemoryKey,
        NodeSpec,
        RetryPolicy,
        graph_from_dict,
        load_graph,
        parse_graph,
        validate_graph,
    )

#: Where each public name lives. Names are imported on first use (see __getattr__), so
#: ``import runtime`` (and with it the ``magistrate`` command's start-up) loads nothing
#: until a program uses a name: the engine, providers, metrics (prometheus_client) and the
#: stores come in with the first name that needs them.
_HOME: _typing.Final = {
    "OwnershipConfig": "._config",
    "RecoveryConfig": "._config",
    "TimeoutConfig": "._config",
    "ExpressionError": "._errors",
    "MalformedResponseError": "._errors",
    "MemoryValueError": "._errors",
    "NodeError": "._errors",
    "NodeTimeoutError": "._errors",
    "ProviderError": "._errors",
    "ProviderHTTPError": "._errors",
    "ProviderTimeoutError": "._errors",
    "RunChangedError": "._errors",
    "RunDrainingError": "._errors",
    "RunNotFoundError": "._errors",
    "RunStateError": "._errors",
    "SpecError": "._errors",
    "SpecErrors": "._errors",
    "ToolArgumentsError": "._errors",
    "ToolTimeoutError": "._errors",
    "TruncatedError": "._errors",
    "UnknownToolError": "._errors",
    "RunHandle": "._handle",
    "RunResult": "._result",
    "RunStatus": "._result",
    "CommitHook": ".engine._log_hooks",
    "CustomJudgeResult": ".llm",
    "Runtime": "._runtime",
    "run_worker": "._worker",
    "RunChange": ".control._watch",
    "GraphChangeRefused": ".control._regraph",
    "NodeContext": ".engine",
    "JudgeContext": ".llm",
    "JudgeProtocol": ".llm",
    "JudgeVerdict": ".llm",
    "Tool": ".llm",
    "ToolRegistry": ".llm",
    "tool": ".llm",
    "AnthropicProvider": ".providers",
    "ChatMessage": ".providers",
    "LlmProvider": ".providers",
    "LlmRequest": ".providers",
    "LlmResponse": ".providers",
    "OpenAIProvider": ".providers",
    "ProviderSettings": ".providers",
    "ScriptedProvider": ".providers",
    "ToolCall": ".providers",
    "ToolSpec": ".providers",
    "Usage": ".providers",
    "ReplayReport": ".replay",
    "Divergence": ".replay",
    "EdgeSpec": ".spec",
    "Goal": ".spec",
    "GraphSpec": ".spec",
    "MemoryKey": ".spec",
    "NodeSpec": ".spec",
    "RetryPolicy": ".spec",
    "graph_from_dict": ".spec",
    "load_graph": ".spec",
    "parse_graph": ".spec",
    "validate_graph": ".spec",
    "MetricsServer": ".observe",
    "RuntimeMetrics": ".observe",
    "default_metrics": ".observe",
    "serve_metrics": ".observe",
}


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [  # noqa: RUF022 (grouped by topic, not sorted)
    # running graphs
    "Runtime",
    "RunHandle",
    "RunResult",
    "RunStatus",
    "RunChange",
    "CommitHook",
    "run_worker",
    "TimeoutConfig",
    "OwnershipConfig",
    "RecoveryConfig",
    "ReplayReport",
    "Divergence",
    # graphs
    "GraphSpec",
    "NodeSpec",
    "EdgeSpec",
    "Goal",
    "MemoryKey",
    "RetryPolicy",
    "load_graph",
    "parse_graph",
    "graph_from_dict",
    "validate_graph",
    # what nodes use
    "NodeContext",
    "tool",
    "Tool",
    "ToolRegistry",
    # judges
    "JudgeProtocol",
    "JudgeContext",
    "JudgeVerdict",
    "CustomJudgeResult",
    # providers
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "ChatMessage",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "OpenAIProvider",
    "AnthropicProvider",
    "ProviderSettings",
    "ScriptedProvider",
    # metrics
    "RuntimeMetrics",
    "MetricsServer",
    "default_metrics",
    "serve_metrics",
    # errors
    "ExpressionError",
    "MalformedResponseError",
    "MemoryValueError",
    "NodeError",
    "NodeTimeoutError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeoutError",
    "RunChangedError",
    "RunDrainingError",
    "RunNotFoundError",
    "RunStateError",
    "GraphChangeRefused",
    "SpecError",
    "SpecErrors",
    "ToolArgumentsError",
    "ToolTimeoutError",
    "TruncatedError",
    "UnknownToolError",
]
