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

import typing as _typing

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
from ._result import RunResult
from ._runtime import Runtime
from ._worker import run_worker
from .control._regraph import GraphChangeRefused
from .control._watch import RunChange
from .engine import NodeContext
from .llm import JudgeContext, JudgeProtocol, JudgeVerdict, Tool, ToolRegistry, tool
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

if _typing.TYPE_CHECKING:
    from .observe import MetricsServer, RuntimeMetrics, default_metrics, serve_metrics

#: Public names imported on first use (see __getattr__): prometheus_client is loaded only
#: by a program that makes metrics.
_LAZY_METRICS = frozenset({"MetricsServer", "RuntimeMetrics", "default_metrics", "serve_metrics"})


def __getattr__(name: str) -> _typing.Any:
    """The metrics names, imported on first use."""
    if name in _LAZY_METRICS:
        from . import observe

        return getattr(observe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_METRICS)


__all__ = [  # noqa: RUF022 (grouped by topic, not sorted)
    # running graphs
    "Runtime",
    "RunHandle",
    "RunResult",
    "RunChange",
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
