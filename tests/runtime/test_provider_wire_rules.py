"""Wire rules per provider: blank text blocks, tool names, tool errors, cache tokens, the
SDKs' retry rules and the provider's own error fields, over a real loopback server."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import tool
from runtime._errors import ProviderHTTPError
from runtime.events._conversation import ConversationEntry
from runtime.llm._prompt import chat_message
from runtime.llm._tools import ToolRegistry
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest, ToolCall, ToolSpec
from runtime.providers._openai import OpenAIProvider
from runtime.providers._scripted import ScriptedProvider

from .llm_servers import (
    AnthropicServer,
    OpenAIServer,
    anthropic_message,
    openai_completion,
    text,
)
from .sdk_referee import anthropic_error, error_fields, openai_error

pytestmark = pytest.mark.anyio


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")])


def anthropic(server: AnthropicServer, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(api_key=server.api_key, base_url=server.base_url, **kwargs)


def openai(server: OpenAIServer, **kwargs: Any) -> OpenAIProvider:
    return OpenAIProvider(api_key=server.api_key, base_url=server.base_url, **kwargs)


async def test_blank_text_is_never_sent_to_anthropic_and_tool_errors_say_so() -> None:
    call = ToolCall(id="toolu_1", name="search", arguments={"q": "x"})
    messages = [
        ChatMessage(role="user", content="Find x"),
        ChatMessage(role="assistant", content="\n\n", tool_calls=[call]),
        ChatMessage(role="tool", content="boom", tool_call_id="toolu_1", is_error=True),
        ChatMessage(role="assistant", content="  \n"),
        ChatMessage(role="user", content="Go on"),
    ]
    async with AnthropicProvider(api_key="k") as llm:
        body = llm.build_payload(LlmRequest(messages=messages))
    blocks = [b for m in body["messages"] for b in m["content"]]
    assert all(b["text"].strip() for b in blocks if b["type"] == "text")
    [result] = [b for b in blocks if b["type"] == "tool_result"]
    assert result["is_error"] is True
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_a_tool_error_in_the_conversation_reaches_the_provider_as_an_error() -> None:
    entry = ConversationEntry(role="tool", content="boom", kind="tool_error", tool_call_id="c")
    assert chat_message(entry).is_error is True
    ok = ConversationEntry(role="tool", content="fine", kind="tool_result", tool_call_id="c")
    assert chat_message(ok).is_error is False


@pytest.mark.parametrize("name", ["web.search", "x" * 65, "search tool", "héllo"])
def test_a_tool_name_the_apis_refuse_fails_at_registration(name: str) -> None:
    @tool(name=name)
    def search(query: str) -> str:
        """Search."""
        return query

    with pytest.raises(ValueError, match="refused by the model APIs"):
        ToolRegistry([search])


def test_a_tool_name_the_apis_accept_registers() -> None:
    @tool(name="web-search_2")
    def search(query: str) -> str:
        """Search."""
        return query

    assert ToolRegistry([search]).get("web-search_2") is search


async def test_cache_tokens_are_counted(
    anthropic_server: AnthropicServer, openai_server: OpenAIServer
) -> None:
    message = anthropic_message(text("ok"))
    message["usage"].update(cache_read_input_tokens=100, cache_creation_input_tokens=20)
    anthropic_server.respond(message)
    completion = openai_completion("ok", prompt_tokens=300)
    completion["usage"]["prompt_tokens_details"] = {"cached_tokens": 256}
    openai_server.respond(completion)
    async with anthropic(anthropic_server) as a, openai(openai_server) as o:
        claude, gpt = await a.complete(ask()), await o.complete(ask())
        a_stats, o_stats = a.statistics(), o.statistics()
    assert (claude.usage.input_cached, claude.usage.input_cache_write) == (100, 20)
    assert (a_stats.input_cached, a_stats.input_cache_write) == (100, 20)
    assert (gpt.usage.input_tokens, gpt.usage.input_cached) == (300, 256)
    assert o_stats.input_cached == 256


PROVIDERS = {
    "anthropic": (anthropic, anthropic_error, lambda: anthropic_message(text("ok"))),
    "openai": (openai, openai_error, lambda: openai_completion("ok")),
}


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_every_status_the_sdks_retry_is_retried_and_the_last_error_kept(
    request: pytest.FixtureRequest, api: str, status: int
) -> None:
    server = request.getfixturevalue(f"{api}_server")
    make, error, answer = PROVIDERS[api]
    server.enqueue(error(status, "busy, once"))
    server.respond(answer())
    last = error(status, "busy for good")
    server.enqueue(error(status, "busy"), last)
    async with make(server, retry_wait_initial=0.01, retry_wait_max=0.02, max_retries=1) as llm:
        assert (await llm.complete(ask())).text == "ok"
        assert llm.statistics().retries == 1
        with pytest.raises(ProviderHTTPError) as failed:
            await llm.complete(ask())
        stats = llm.statistics()
    assert (stats.retries, stats.failures) == (2, 1)
    # The error is the last answer's, with the provider's own type, code and request id.
    assert (failed.value.status, failed.value.retryable) == (status, True)
    assert failed.value.reason == "busy for good"
    err = failed.value
    assert (err.error_type, err.code, err.request_id) == error_fields(last)
    assert err.request_id is not None and err.request_id in str(err)


async def test_x_should_retry_decides_over_the_status(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(openai_error(400, "x", headers={"x-should-retry": "true"}))
    openai_server.respond(openai_completion("ok"))
    refused = openai_error(500, "y", headers={"x-should-retry": "false"})
    openai_server.enqueue(refused)
    async with openai(openai_server, retry_wait_initial=0.01, retry_wait_max=0.02) as llm:
        assert (await llm.complete(ask())).text == "ok"
        with pytest.raises(ProviderHTTPError) as failed:
            await llm.complete(ask())
        assert llm.statistics().retries == 1  # the first call's only
    assert failed.value.status == 500 and not failed.value.retryable
    err = failed.value
    assert (err.error_type, err.code, err.request_id) == error_fields(refused)


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (503, {"retry-after": "0.05"}),
        (529, {"retry-after-ms": "50"}),
        (429, {"retry-after-ms": "50"}),
    ],
)
async def test_the_wait_the_provider_asks_for_is_honoured(
    anthropic_server: AnthropicServer, status: int, headers: dict[str, str]
) -> None:
    anthropic_server.enqueue(anthropic_error(status, headers=headers))
    anthropic_server.respond(anthropic_message(text("ok")))
    async with anthropic(anthropic_server, retry_wait_initial=5.0, retry_wait_max=5.0) as llm:
        await llm.complete(ask())
        # The asked wait, not the 5 s backoff.
        assert llm.statistics().retry_wait_s == pytest.approx(0.05)


async def test_errors_keep_the_providers_type_code_and_request_id(
    anthropic_server: AnthropicServer, openai_server: OpenAIServer
) -> None:
    bad_block = anthropic_error(400, "bad block")
    # Anthropic names the request in its body too: kept when the header is missing.
    body_only = anthropic_error(404, "no such model")
    body_only.headers.clear()
    anthropic_server.enqueue(bad_block, body_only)
    bad_param = openai_error(400, "bad param")
    openai_server.enqueue(bad_param)
    async with anthropic(anthropic_server) as a, openai(openai_server) as o:
        with pytest.raises(ProviderHTTPError) as claude:
            await a.complete(ask())
        with pytest.raises(ProviderHTTPError) as missing:
            await a.complete(ask())
        with pytest.raises(ProviderHTTPError) as gpt:
            await o.complete(ask())
    for caught, answer in ((claude, bad_block), (missing, body_only), (gpt, bad_param)):
        err = caught.value
        assert not err.retryable
        assert (err.error_type, err.code, err.request_id) == error_fields(answer)
        assert err.request_id is not None and err.request_id in str(err)
    assert claude.value.reason == "bad block" and claude.value.error_type == "invalid_request_error"
    assert missing.value.error_type == "not_found_error"
    assert (gpt.value.error_type, gpt.value.code) == (
        "invalid_request_error",
        "unsupported_parameter",
    )


async def test_the_scripted_model_checks_each_providers_encoded_request() -> None:
    llm = ScriptedProvider(["ok", "ok"])
    call = ToolCall(id="toolu_1", name="search", arguments={})
    # A blank text beside a tool call is dropped by the Anthropic encoding: accepted.
    blank = [
        ChatMessage(role="user", content="go"),
        ChatMessage(role="assistant", content="\n\n", tool_calls=[call]),
        ChatMessage(role="tool", content="r", tool_call_id="toolu_1"),
    ]
    assert (await llm.complete(LlmRequest(messages=blank))).text == "ok"
    dotted = ToolSpec(name="web.search", parameters={"type": "object"})
    with pytest.raises(ProviderHTTPError, match=r"function name 'web\.search'"):
        await llm.complete(LlmRequest(messages=blank[:1], tools=[dotted]))
