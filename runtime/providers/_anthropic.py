"""An LLM provider for Anthropic's Messages API."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Unpack

from .._errors import MalformedResponseError
from ._base import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    Stop,
    ToolCall,
    Usage,
    decode_tool_arguments,
    require,
    shown,
    token_count,
)
from ._http import _HttpProvider
from ._models import DEFAULT_ANTHROPIC_MODEL, anthropic_family, wire_token_cap
from ._settings import ApiDefaults, ProviderOptions, ProviderSettings, endpoint

if TYPE_CHECKING:
    import httpx

__all__ = ["AnthropicProvider", "encode_request"]

_API_VERSION = "2023-06-01"
_JSON_INSTRUCTION = "Answer with a single JSON object and nothing else."
_STOPS: dict[str, Stop] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


class AnthropicProvider(_HttpProvider):
    """Messages over HTTP: ``POST {base_url}/v1/messages`` (a query in ``base_url`` is
    kept after the path).

    Configured as :class:`OpenAIProvider` is (a :class:`ProviderSettings`, its fields as
    keyword arguments, or both), from the ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``
    (default ``https://api.anthropic.com``) and ``ANTHROPIC_MODEL`` (default
    ``DEFAULT_ANTHROPIC_MODEL``) variables where unset.

    The system prompt goes top-level (``system`` messages in the conversation are
    appended to it); tool calls are ``tool_use`` blocks and tool results ``tool_result``
    blocks in a user message; consecutive messages of one role are merged, so several
    tool results travel together. The API has no JSON mode: ``json_response`` adds an
    instruction to the system prompt. Retries as :class:`OpenAIProvider` (429 with
    ``Retry-After``, 5xx including 529 overloaded, connection failures, timeouts), with
    ``timeout`` bounding each attempt as a whole and ``deadline`` the whole call.
    ``max_tokens`` is the cap sent when a request sets none (the API requires one).
    What travels with a model depends on its family (``_models.py``): current
    generations get no ``temperature``, and a request's cap is raised by room for
    their thinking.

    ``max_response_bytes`` (default 32 MiB) bounds an answer's body, counted decompressed
    as it streams: a larger one is a ProviderError naming the limit.
    """

    DEFAULTS = ApiDefaults(
        "ANTHROPIC", "anthropic", "https://api.anthropic.com", DEFAULT_ANTHROPIC_MODEL
    )

    def __init__(
        self,
        settings: ProviderSettings | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        max_tokens: int = 4096,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(settings, options, http_client)
        self.max_tokens = max_tokens

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Send one Messages request and return the parsed answer.

        Blocks until the API answered, through retries and their waits; cancellation
        abandons the call. Raises ProviderHTTPError, ProviderTimeoutError, ProviderError
        (connection failed) after the last attempt, or MalformedResponseError (with the
        answer's request id) at once for an answer that cannot be parsed. A ``tool_use``
        input that is no JSON object does not fail the answer: its call keeps it as text
        (``ToolCall.raw_arguments``).
        """
        started = time.perf_counter()
        answer = await self._transport.post_json(
            endpoint(self.base_url, "/v1/messages"),
            self.build_payload(request),
            {"x-api-key": self._api_key, "anthropic-version": _API_VERSION},
        )
        return self._transport.read(self.parse_response, read_usage, answer, started)

    def build_payload(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and logs can show the wire form)."""
        return encode_request(
            request, model=request.model or self.model, max_tokens=self.max_tokens
        )

    def parse_response(self, data: dict[str, Any], *, latency_ms: float = 0.0) -> LlmResponse:
        """An :class:`LlmResponse` from a decoded Messages API body."""
        name = self.name
        content = require(name, data, "content", list)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            if not isinstance(block, dict):
                raise MalformedResponseError(
                    name, f"content block is not an object: {shown(block)}"
                )
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    raise MalformedResponseError(name, "text block without a string 'text'")
                texts.append(text)
            elif kind == "tool_use":
                tool = block.get("name")
                if not isinstance(tool, str) or not tool:
                    raise MalformedResponseError(
                        name, f"tool_use block without a name: {shown(block)}"
                    )
                # The API sends an object; anything else (a compatible server's JSON
                # text, another value) is read as OpenAI's arguments are: an object, or
                # the call's error with the text kept.
                arguments, raw_arguments = decode_tool_arguments(block.get("input"))
                call_id = block.get("id") or f"toolu_{len(calls) + 1}"
                if not isinstance(call_id, str):
                    raise MalformedResponseError(name, f"tool_use {tool!r} has a non-string id")
                calls.append(
                    ToolCall(
                        id=call_id, name=tool, arguments=arguments, raw_arguments=raw_arguments
                    )
                )
            # Other block kinds (thinking, ...) carry nothing a node consumes.
        usage = read_usage(name, data)
        stop = data.get("stop_reason")
        kind = _STOPS.get(stop, "other") if isinstance(stop, str) else "end"
        return LlmResponse(
            text="".join(texts),
            # A tool call cut at the cap has incomplete input: it is never run.
            tool_calls=[] if kind == "max_tokens" else calls,
            usage=usage,
            model=data["model"] if isinstance(data.get("model"), str) else "",
            stop_reason=stop if isinstance(stop, str) else None,
            stop=kind,
            latency_ms=latency_ms,
        )


def read_usage(provider: str, data: dict[str, Any]) -> Usage:
    """The token counts of a Messages API body (``usage`` absent: zeros); MalformedResponseError
    when a count is no token count."""
    usage = data.get("usage")
    if usage is None:
        return Usage()
    if not isinstance(usage, dict):
        raise MalformedResponseError(provider, f"usage is not an object: {shown(usage)}")
    return Usage(
        input_tokens=token_count(provider, usage, "input_tokens"),
        output_tokens=token_count(provider, usage, "output_tokens"),
        input_cached=token_count(provider, usage, "cache_read_input_tokens"),
        input_cache_write=token_count(provider, usage, "cache_creation_input_tokens"),
    )


def encode_request(request: LlmRequest, *, model: str, max_tokens: int = 4096) -> dict[str, Any]:
    """The Messages body for ``request`` sent to ``model``; ``max_tokens`` is the cap sent
    when the request sets none (see AnthropicProvider)."""
    system_parts = [request.system] if request.system else []
    system_parts += [m.content for m in request.messages if m.role == "system" and m.content]
    if request.json_response:
        system_parts.append(_JSON_INSTRUCTION)
    family = anthropic_family(model)
    payload: dict[str, Any] = {
        "model": model,
        # The API requires a cap: the provider's own when the request sets none.
        "max_tokens": (
            max_tokens if request.max_tokens is None else wire_token_cap(family, request.max_tokens)
        ),
        "messages": _encode_messages(request.messages),
    }
    if system_parts:
        payload["system"] = "\n\n".join(system_parts)
    if request.temperature is not None and family.sampling:
        payload["temperature"] = request.temperature
    if request.tools:
        payload["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    if request.tool_choice is not None:
        choice = request.tool_choice
        if choice == "auto":
            payload["tool_choice"] = {"type": "auto"}
        elif choice == "required":
            payload["tool_choice"] = {"type": "any"}
        elif choice == "none":
            payload["tool_choice"] = {"type": "none"}
        else:
            payload["tool_choice"] = {"type": "tool", "name": choice}
    return payload


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content,
        }
        if message.is_error:
            result["is_error"] = True
        return [result]
    blocks: list[dict[str, Any]] = []
    # The API refuses a text block of whitespace only ("\n\n" after a tool call).
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _encode_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages API turns: tool results become user turns; same-role neighbours merge.

    The API wants alternating roles and rejects empty content, so an empty assistant
    message is dropped and consecutive turns of one role become one turn with several
    blocks (tool results first, as they came).
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out
