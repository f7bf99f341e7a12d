"""An LLM provider for OpenAI-compatible chat completions APIs (OpenAI, vLLM, Ollama, ...)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Literal, Unpack

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
from ._models import DEFAULT_OPENAI_MODEL, VERDICT_PURPOSES, openai_family, wire_token_cap
from ._settings import ApiDefaults, ProviderOptions, ProviderSettings, endpoint

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIProvider", "encode_request"]

_STOPS: dict[str, Stop] = {
    "stop": "end",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIProvider(_HttpProvider):
    """Chat completions over HTTP: ``POST {base_url}/chat/completions`` (a query in
    ``base_url``, such as Azure's ``?api-version=...``, is kept after the path).

    Settings come as a :class:`ProviderSettings`, as keyword arguments of its fields
    (``OpenAIProvider(model=..., timeout=...)``, which override the object's), or both;
    :attr:`settings` holds them resolved. Unset ones come from ``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``) and ``OPENAI_MODEL``
    (default: ``DEFAULT_OPENAI_MODEL`` in ``_models.py``); a missing API key is a
    :class:`ProviderError` at construction.

    Retries (``max_retries`` beyond the first attempt) on HTTP 429 (honouring
    ``Retry-After``, capped by ``retry_wait_max``), 5xx, connection failures and
    timeouts; other 4xx fail at once. ``timeout`` bounds each attempt as a whole (a
    server that drips its answer cannot hold it open); ``deadline`` bounds the whole
    call with its retries. A request's ``max_tokens`` is sent as
    ``max_completion_tokens`` (what current OpenAI models take; ``max_tokens_field=
    "max_tokens"`` for servers that only know the older name), and nothing is sent when
    the request leaves it unset. Reasoning models (``_models.py``) always get
    ``max_completion_tokens``, raised by room for their reasoning, no ``temperature``,
    and ``reasoning_effort: "low"`` on judge, route, verify and scoring calls. The
    provider owns its ``httpx.AsyncClient``
    unless one is passed in; close it with :meth:`aclose` or ``async with``::

        async with OpenAIProvider(model="gpt-5.4-mini") as llm:
            answer = await llm.complete(LlmRequest(messages=[ChatMessage(role="user",
                                                                         content="Hi")]))

    ``max_response_bytes`` (default 32 MiB) bounds an answer's body, counted decompressed
    as it streams: a larger one is a ProviderError naming the limit.
    """

    DEFAULTS = ApiDefaults("OPENAI", "openai", "https://api.openai.com/v1", DEFAULT_OPENAI_MODEL)

    def __init__(
        self,
        settings: ProviderSettings | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = (
            "max_completion_tokens"
        ),
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(settings, options, http_client)
        self.max_tokens_field = max_tokens_field

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Send one chat completion and return the parsed answer.

        Blocks until the API answered, through retries and their waits; cancellation
        abandons the call. Raises ProviderHTTPError, ProviderTimeoutError, ProviderError
        (connection failed) after the last attempt, or MalformedResponseError (with the
        answer's request id) at once for an answer that cannot be parsed. Tool arguments
        that are no JSON object do not fail the answer: their call keeps the text
        (``ToolCall.raw_arguments``).
        """
        started = time.perf_counter()
        payload = self.build_payload(request)
        answer = await self._transport.post_json(
            endpoint(self.base_url, "/chat/completions"),
            payload,
            {"authorization": f"Bearer {self._api_key}"},
        )
        return self._transport.read(self.parse_response, read_usage, answer, started)

    def build_payload(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body for ``request`` (public so tests and logs can show the wire form)."""
        return encode_request(
            request, model=request.model or self.model, max_tokens_field=self.max_tokens_field
        )

    def parse_response(self, data: dict[str, Any], *, latency_ms: float = 0.0) -> LlmResponse:
        """An :class:`LlmResponse` from a decoded chat completion body."""
        name = self.name
        choices = require(name, data, "choices", list)
        if not choices or not isinstance(choices[0], dict):
            raise MalformedResponseError(name, "response has no choices")
        choice = choices[0]
        message = require(name, choice, "message", dict)
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise MalformedResponseError(name, "message content is not a string")
        finish = choice.get("finish_reason")
        stop = _STOPS.get(finish, "other") if isinstance(finish, str) else "end"
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            text, stop = refusal, "refusal"
        calls: list[ToolCall] = []
        # A tool call cut at the cap has incomplete arguments: it is never run (or read).
        raw_calls = [] if stop == "max_tokens" else message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise MalformedResponseError(
                name, f"message tool_calls is not a list: {type(raw_calls).__name__}"
            )
        for raw in raw_calls:
            if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
                raise MalformedResponseError(name, f"malformed tool call: {shown(raw)}")
            function = raw["function"]
            tool = function.get("name")
            if not isinstance(tool, str) or not tool:
                raise MalformedResponseError(name, f"tool call without a name: {shown(raw)}")
            call_id = raw.get("id") or f"call_{len(calls) + 1}"
            if not isinstance(call_id, str):
                raise MalformedResponseError(name, f"tool call {tool!r} has a non-string id")
            # Arguments that are no JSON object are the call's error, answered to the model.
            arguments, raw_arguments = decode_tool_arguments(function.get("arguments"))
            calls.append(
                ToolCall(id=call_id, name=tool, arguments=arguments, raw_arguments=raw_arguments)
            )
        return LlmResponse(
            text=text,
            tool_calls=calls,
            usage=read_usage(name, data),
            model=data["model"] if isinstance(data.get("model"), str) else "",
            stop_reason=finish if isinstance(finish, str) else None,
            stop=stop,
            latency_ms=latency_ms,
        )


def encode_request(
    request: LlmRequest,
    *,
    model: str,
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
) -> dict[str, Any]:
    """The chat completions body for ``request`` sent to ``model`` (see OpenAIProvider)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_encode_message(m) for m in request.messages)
    family = openai_family(model)
    payload: dict[str, Any] = {"model": model, "messages": messages}
    if request.max_tokens is not None:
        field = family.cap_field or max_tokens_field
        payload[field] = wire_token_cap(family, request.max_tokens)
    if request.temperature is not None and family.sampling:
        payload["temperature"] = request.temperature
    if family.low_effort is not None and request.purpose in VERDICT_PURPOSES:
        key, value = family.low_effort
        payload[key] = value
    if request.tools:
        payload["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    if request.tool_choice is not None:
        if request.tool_choice in ("auto", "none", "required"):
            payload["tool_choice"] = request.tool_choice
        else:
            payload["tool_choice"] = {
                "type": "function",
                "function": {"name": request.tool_choice},
            }
    if request.json_response:
        payload["response_format"] = {"type": "json_object"}
    return payload


def read_usage(provider: str, data: dict[str, Any]) -> Usage:
    """The token counts of a chat completion body (``usage`` absent: zeros); MalformedResponseError
    when a count is no token count."""
    usage = data.get("usage")
    if usage is None:
        return Usage()
    if not isinstance(usage, dict):
        raise MalformedResponseError(provider, f"usage is not an object: {shown(usage)}")
    return Usage(
        input_tokens=token_count(provider, usage, "prompt_tokens"),
        output_tokens=token_count(provider, usage, "completion_tokens"),
        input_cached=_cached_tokens(provider, usage),
    )


def _cached_tokens(provider: str, usage: dict[str, Any]) -> int:
    """``usage.prompt_tokens_details.cached_tokens`` (absent: 0)."""
    details = usage.get("prompt_tokens_details")
    return token_count(provider, details, "cached_tokens") if isinstance(details, dict) else 0


def _encode_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content,
        }
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # The API wants null, not "", when the turn is only tool calls.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ],
        }
    encoded: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name and message.role == "user":
        encoded["name"] = message.name
    return encoded
