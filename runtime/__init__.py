"""The domain: graph specs, the executor, nodes, judges, LLM providers and the Python API.

Start here::

    async with Runtime("runs.db", functions={...}, provider=...) as rt:
        handle = await rt.start(graph, input={...})
        result = await handle.result()
"""

from ._anthropic import AnthropicProvider
from ._conversation import build_system_prompt, transition_marker
from ._errors import (
    ExpressionError,
    MalformedResponseError,
    NodeError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
    RunNotFoundError,
    RunStateError,
    SpecError,
    SpecErrors,
    ToolArgumentsError,
    UnknownToolError,
)
from ._expr import Expression, compile_expression
from ._fork import RunForked
from ._function_node import NodeContext
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
from ._openai import OpenAIProvider
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
from ._tools import Tool, ToolRegistry, tool

__all__ = [
    "AnthropicProvider",
    "ChatMessage",
    "EdgeSpec",
    "Expression",
    "ExpressionError",
    "Goal",
    "GraphSpec",
    "ImplicitJudge",
    "JudgeContext",
    "JudgeProtocol",
    "JudgeVerdict",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "MalformedResponseError",
    "MemoryKey",
    "NodeContext",
    "NodeError",
    "NodeSpec",
    "OpenAIProvider",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeoutError",
    "RetryPolicy",
    "RunForked",
    "RunHandle",
    "RunNotFoundError",
    "RunResult",
    "RunStateError",
    "Runtime",
    "ScriptedProvider",
    "SpecError",
    "SpecErrors",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolRegistry",
    "ToolSpec",
    "UnknownToolError",
    "Usage",
    "VerifierSpec",
    "build_system_prompt",
    "compact_graph_dict",
    "compile_expression",
    "function_ref",
    "graph_from_dict",
    "graph_hash",
    "graph_to_dict",
    "load_graph",
    "parse_graph",
    "parse_json_object",
    "tool",
    "transition_marker",
    "validate_graph",
]
