"""The domain: graph specs, the executor, nodes, judges, LLM providers and the Python API.

A run's log holds the event bodies defined here (``NodeStarted``, ``RunFinished``, ...,
registered with the store's codec on import); :func:`fold` turns a run's events into its
:class:`RunState`.

Start here::

    async with Runtime("runs.db", functions={...}, provider=...) as rt:
        handle = await rt.start(graph, input={...})
        result = await handle.result()
"""

import typing as _typing

from ._anthropic import AnthropicProvider
from ._conversation import build_system_prompt, transition_marker
from ._conversation_state import Conversation
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
    UnknownToolError,
)
from ._events import (
    AnyEvent,
    BranchesForked,
    BranchesJoined,
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
    ConversationCompacted,
    EdgeTaken,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    StallDetected,
    ToolCallRecord,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from ._expr import Expression, compile_expression
from ._function_node import NodeContext
from ._goal_spec import (
    Constraint,
    ConstraintOutcome,
    CriterionOutcome,
    GoalOutcome,
    SuccessCriterion,
)
from ._judge import (
    ImplicitJudge,
    JudgeContext,
    JudgeProtocol,
    JudgeVerdict,
)
from ._llm import (
    ChatMessage,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ToolCall,
    ToolSpec,
    Usage,
    parse_json_object,
)
from ._mermaid import graph_to_mermaid
from ._openai import OpenAIProvider
from ._parallel_spec import (
    BranchCandidate,
    BranchJudgeSpec,
    BranchSpec,
    BranchStrategy,
    ParallelSpec,
)
from ._result import RunResult
from ._runtime import RunHandle, Runtime
from ._scripted import ScriptedProvider
from ._spec import (
    EdgeSpec,
    Goal,
    GraphSpec,
    MemoryKey,
    NodeSpec,
    RetryPolicy,
    VerifierSpec,
    compact_graph_dict,
    function_ref,
    graph_hash,
    graph_to_dict,
)
from ._spec_load import graph_from_dict, load_graph, parse_graph
from ._spec_validate import validate_graph
from ._state import (
    ConversationEntry,
    PauseInfo,
    RunState,
    StallEntry,
    VerdictEntry,
    VerdictRecord,
    fold,
)
from ._timeline import describe_event, render_timeline
from ._tools import Tool, ToolRegistry, tool
from ._verifier_spec import (
    ExpressionVerifier,
    JsonPathAssertion,
    JsonPathVerifier,
    LlmJudgeVerifier,
    VerificationResult,
)
from ._worker import run_worker

if _typing.TYPE_CHECKING:
    from ._metrics import MetricsServer, RuntimeMetrics, default_metrics, serve_metrics

#: Public names imported on first use (see __getattr__): prometheus_client is loaded only
#: by a program that makes metrics.
_LAZY_METRICS = frozenset({"MetricsServer", "RuntimeMetrics", "default_metrics", "serve_metrics"})


def __getattr__(name: str) -> _typing.Any:
    """The metrics names, imported on first use."""
    if name in _LAZY_METRICS:
        from . import _metrics

        return getattr(_metrics, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_METRICS)


__all__ = [
    "AnthropicProvider",
    "AnyEvent",
    "BranchCandidate",
    "BranchFinished",
    "BranchJudgeSpec",
    "BranchJudgeWarning",
    "BranchSpec",
    "BranchStrategy",
    "BranchToolResult",
    "BranchTurn",
    "BranchesForked",
    "BranchesJoined",
    "BranchesJudged",
    "BranchesSelected",
    "ChatMessage",
    "Constraint",
    "ConstraintOutcome",
    "Conversation",
    "ConversationCompacted",
    "ConversationEntry",
    "CriterionOutcome",
    "EdgeSpec",
    "EdgeTaken",
    "Expression",
    "ExpressionError",
    "ExpressionVerifier",
    "Goal",
    "GoalOutcome",
    "GraphSpec",
    "ImplicitJudge",
    "InputInjected",
    "JsonPathAssertion",
    "JsonPathVerifier",
    "JudgeContext",
    "JudgeProtocol",
    "JudgeVerdict",
    "LlmJudgeVerifier",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "LlmTurn",
    "MalformedResponseError",
    "MemoryKey",
    "MemoryValueError",
    "MemoryWritten",
    "MessageAdded",
    "MetricsServer",
    "NodeCompleted",
    "NodeContext",
    "NodeError",
    "NodeFailed",
    "NodeSpec",
    "NodeStarted",
    "NodeTimeoutError",
    "OpenAIProvider",
    "OutputSet",
    "ParallelSpec",
    "PauseInfo",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeoutError",
    "RetryPolicy",
    "RunCancelled",
    "RunFinished",
    "RunForked",
    "RunHandle",
    "RunNotFoundError",
    "RunPaused",
    "RunResult",
    "RunResumed",
    "RunStarted",
    "RunState",
    "RunStateError",
    "Runtime",
    "RuntimeMetrics",
    "ScriptedProvider",
    "SpecError",
    "SpecErrors",
    "StallDetected",
    "StallEntry",
    "SuccessCriterion",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallRecord",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolTimeoutError",
    "UnknownToolError",
    "Usage",
    "Verdict",
    "VerdictEntry",
    "VerdictRecord",
    "VerificationRecorded",
    "VerificationResult",
    "VerifierSpec",
    "build_system_prompt",
    "compact_graph_dict",
    "compile_expression",
    "default_metrics",
    "describe_event",
    "fold",
    "function_ref",
    "graph_from_dict",
    "graph_hash",
    "graph_to_dict",
    "graph_to_mermaid",
    "load_graph",
    "parse_graph",
    "parse_json_object",
    "render_timeline",
    "run_worker",
    "serve_metrics",
    "tool",
    "transition_marker",
    "validate_graph",
]
