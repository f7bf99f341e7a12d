"""LLM providers: the message types, the provider protocol, and the clients.

:class:`OpenAIProvider` (OpenAI-compatible chat completions) and
:class:`AnthropicProvider` (the Messages API) speak HTTP through httpx, imported when a
provider makes its client; :class:`ScriptedProvider` answers from a script, offline.
Any object with the :class:`LlmProvider` method is a provider.
"""

from ._anthropic import AnthropicProvider
from ._base import (
    ChatMessage,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ProviderStatistics,
    ToolCall,
    ToolSpec,
    Usage,
    parse_json_object,
)
from ._openai import OpenAIProvider
from ._scripted import ScriptedProvider, reply, tool_call
from ._settings import ProviderSettings

__all__ = [
    "AnthropicProvider",
    "ChatMessage",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "OpenAIProvider",
    "ProviderSettings",
    "ProviderStatistics",
    "ScriptedProvider",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "parse_json_object",
    "reply",
    "tool_call",
]
