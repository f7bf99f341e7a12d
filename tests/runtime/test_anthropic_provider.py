"""AnthropicProvider against a real loopback HTTP server speaking the Messages API."""

from __future__ import annotations

import json

import pytest

from runtime._errors import (
    MalformedResponseError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
)
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmProvider, LlmRequest, ToolCall, ToolSpec
from runtime.providers._models import DEFAULT_ANTHROPIC_MODEL

from .llm_servers import AnthropicServer, Scripted, anthropic_message, text, tool_use
from .sdk_referee import anthropic_error, error_fields

pytestmark = pytest.mark.anyio

SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)


def make(server: AnthropicServer, **kwargs: object) -> AnthropicProvider:
    options: dict[str, object] = {
        "api_key": server.api_key,
        "base_url": server.base_url,
        "retry_wait_initial": 0.01,
        "retry_wait_max": 0.05,
    }
    options.update(kwargs)
    return AnthropicProvider(**options)  # type: ignore[arg-type]


def ask(content: str = "Hello", **kwargs: object) -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content=content)], **kwargs)  # type: ignore[arg-type]


async def test_plain_text_answer_and_wire_format(anthropic_server: AnthropicServer) -> None:
    anthropic_server.respond(
        anthropic_message(text("Hello, "), text("world."), input_tokens=30, output_tokens=4)
    )
    # A Claude 3 model: the family that still takes temperature and an unpadded cap.
    async with make(anthropic_server, model="claude-3-test") as llm:
        assert isinstance(llm, LlmProvider)
        answer = await llm.complete(ask(system="Be brief.", max_tokens=64, temperature=0.0))
    assert answer.text == "Hello, world."
    assert answer.tool_calls == []
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (30, 4)
    assert answer.stop_reason == "end_turn"
    assert answer.model == "claude-3-5-haiku-20241022"
    [request] = anthropic_server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == anthropic_server.api_key
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.body == {
        "model": "claude-3-test",
        "max_tokens": 64,
        "system": "Be brief.",
        "temperature": 0.0,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
    }


async def test_tool_calls_round_trip(anthropic_server: AnthropicServer) -> None:
    anthropic_server.respond(
        anthropic_message(
            text("Let me look."),
            tool_use("toolu_1", "search", {"query": "magistrate"}),
            tool_use("toolu_2", "search", {"query": "actors"}),
        )
    )
    anthropic_server.respond(anthropic_message(text("Found both.")))
    async with make(anthropic_server) as llm:
        first = await llm.complete(ask("Find things", tools=[SEARCH], tool_choice="auto"))
        assert first.text == "Let me look."
        assert first.stop_reason == "tool_use"
        assert first.tool_calls == [
            ToolCall(id="toolu_1", name="search", arguments={"query": "magistrate"}),
            ToolCall(id="toolu_2", name="search", arguments={"query": "actors"}),
        ]
        history = [
            ChatMessage(role="user", content="Find things"),
            ChatMessage(role="assistant", content=first.text, tool_calls=first.tool_calls),
            ChatMessage(role="tool", tool_call_id="toolu_1", name="search", content="r1"),
            ChatMessage(role="tool", tool_call_id="toolu_2", name="search", content="r2"),
            ChatMessage(role="user", content="Feedback: cite sources."),
        ]
        second = await llm.complete(LlmRequest(messages=history, tools=[SEARCH]))
    assert second.text == "Found both."
    first_body = anthropic_server.requests[0].body
    assert first_body["tools"] == [
        {"name": "search", "description": "Search the web.", "input_schema": SEARCH.parameters}
    ]
    assert first_body["tool_choice"] == {"type": "auto"}
    messages = anthropic_server.requests[1].body["messages"]
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "Find things"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "search",
                    "input": {"query": "magistrate"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "search",
                    "input": {"query": "actors"},
                },
            ],
        },
        # Consecutive tool results (and the feedback after them) travel in one user turn.
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r1"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "r2"},
                {"type": "text", "text": "Feedback: cite sources."},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("search", {"type": "tool", "name": "search"}),
    ],
)
async def test_tool_choice_mapping(
    anthropic_server: AnthropicServer, choice: str, wire: dict[str, str]
) -> None:
    anthropic_server.respond(anthropic_message(text("ok")))
    async with make(anthropic_server) as llm:
        await llm.complete(ask(tools=[SEARCH], tool_choice=choice))
    assert anthropic_server.requests[0].body["tool_choice"] == wire


async def test_system_messages_and_json_mode_go_to_the_top_level_system(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.respond(anthropic_message(text('{"ok": true}')))
    request = LlmRequest(
        system="Identity.",
        messages=[
            ChatMessage(role="system", content="Focus: be exact."),
            ChatMessage(role="user", content="Go"),
        ],
        json_response=True,
    )
    async with make(anthropic_server) as llm:
        await llm.complete(request)
    body = anthropic_server.requests[0].body
    assert body["system"].startswith("Identity.\n\nFocus: be exact.\n\n")
    assert "JSON object" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]


async def test_usage_accumulates_in_statistics(anthropic_server: AnthropicServer) -> None:
    anthropic_server.respond(anthropic_message(text("a"), input_tokens=3, output_tokens=1))
    anthropic_server.respond(anthropic_message(text("b"), input_tokens=4, output_tokens=2))
    async with make(anthropic_server) as llm:
        await llm.complete(ask())
        await llm.complete(ask())
        stats = llm.statistics()
    assert (stats.input_tokens, stats.output_tokens, stats.calls) == (7, 3, 2)


async def test_429_with_retry_after_is_retried(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(anthropic_error(429, "slow", headers={"retry-after": "1"}))
    anthropic_server.respond(anthropic_message(text("done")))
    async with make(anthropic_server, retry_wait_max=0.2) as llm:
        assert (await llm.complete(ask())).text == "done"
        stats = llm.statistics()
    assert len(anthropic_server.requests) == 2
    assert stats.retries == 1
    assert stats.retry_wait_s == pytest.approx(0.2)  # Retry-After 1 s, capped at 0.2 s


async def test_overloaded_529_then_success(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(anthropic_error(529, "Overloaded"), anthropic_error(500))
    anthropic_server.respond(anthropic_message(text("back")))
    async with make(anthropic_server) as llm:
        assert (await llm.complete(ask())).text == "back"
    assert len(anthropic_server.requests) == 3


async def test_500_forever_fails_after_all_attempts(anthropic_server: AnthropicServer) -> None:
    answers = [anthropic_error(500, "Internal server error") for _ in range(10)]
    anthropic_server.enqueue(*answers)
    async with make(anthropic_server, max_retries=3) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    assert len(anthropic_server.requests) == 4
    assert caught.value.status == 500 and caught.value.retryable
    assert "Internal server error" in str(caught.value)
    # The fourth answer's type and request id (Anthropic's errors have no code).
    err = caught.value
    assert (err.error_type, err.code, err.request_id) == error_fields(answers[3])
    assert err.error_type == "api_error"


async def test_400_is_not_retried(anthropic_server: AnthropicServer) -> None:
    refused = anthropic_error(400, "messages: roles must alternate")
    anthropic_server.enqueue(refused)
    async with make(anthropic_server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    assert len(anthropic_server.requests) == 1
    assert caught.value.status == 400 and not caught.value.retryable
    assert "roles must alternate" in caught.value.reason
    err = caught.value
    assert (err.error_type, err.code, err.request_id) == error_fields(refused)


async def test_wrong_api_key_is_a_401_at_once(anthropic_server: AnthropicServer) -> None:
    async with make(anthropic_server, api_key="nope") as llm:
        with pytest.raises(ProviderHTTPError, match="invalid x-api-key") as caught:
            await llm.complete(ask())
    assert caught.value.status == 401
    assert len(anthropic_server.requests) == 1


async def test_slow_answer_times_out_is_retried_then_fails(
    anthropic_server: AnthropicServer,
) -> None:
    for _ in range(3):
        anthropic_server.enqueue(Scripted(body=anthropic_message(text("late")), delay=5.0))
    async with make(anthropic_server, timeout=0.2, max_retries=2) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
    assert len(anthropic_server.requests) == 3
    assert caught.value.retryable


async def test_malformed_json_body(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(Scripted(body=b"<html>gateway</html>"))
    async with make(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError):
            await llm.complete(ask())
    assert len(anthropic_server.requests) == 1


async def test_missing_content_is_malformed(anthropic_server: AnthropicServer) -> None:
    anthropic_server.respond({"type": "message", "role": "assistant"})
    async with make(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError, match="content"):
            await llm.complete(ask())


async def test_an_answer_that_cannot_be_read_counts_as_a_failure(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.respond(
        anthropic_message({"type": "tool_use", "id": 7, "name": "search", "input": {}})
    )
    async with make(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError, match="search"):
            await llm.complete(ask())
        stats = llm.statistics()
    assert (stats.calls, stats.attempts, stats.failures) == (1, 1, 1)
    # The model was paid for the answer: its tokens count though it cannot be read.
    assert (stats.input_tokens, stats.output_tokens) == (12, 7)


async def test_broken_tool_input_is_kept_with_its_call(anthropic_server: AnthropicServer) -> None:
    # As OpenAI's arguments: the call's error, told to the model by the node.
    anthropic_server.respond(anthropic_message(tool_use("toolu_9", "search", '{"query": "x')))
    async with make(anthropic_server) as llm:
        answer = await llm.complete(ask(tools=[SEARCH]))
    assert answer.tool_calls == [
        ToolCall(id="toolu_9", name="search", arguments={}, raw_arguments='{"query": "x')
    ]


async def test_configuration_from_environment(
    anthropic_server: AnthropicServer, monkeypatch: pytest.MonkeyPatch, no_provider_env: None
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", anthropic_server.api_key)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.base_url)
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-env")
    anthropic_server.respond(anthropic_message(text("from env")))
    async with AnthropicProvider() as llm:
        assert (await llm.complete(ask())).text == "from env"
    assert anthropic_server.requests[0].body["model"] == "claude-env"


async def test_defaults_without_environment(
    monkeypatch: pytest.MonkeyPatch, no_provider_env: None
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    async with AnthropicProvider() as llm:
        assert llm.base_url == "https://api.anthropic.com"
        assert llm.model == DEFAULT_ANTHROPIC_MODEL


async def test_missing_api_key_fails_at_construction(no_provider_env: None) -> None:
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider()


# --- answers a real API would never send, and servers that misbehave ---------------------


async def test_a_request_without_max_tokens_sends_the_providers_cap(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.respond(anthropic_message(text("ok")))
    async with make(anthropic_server, max_tokens=333) as llm:
        await llm.complete(ask())
    assert anthropic_server.bodies()[0]["max_tokens"] == 333


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            {**anthropic_message(text("x")), "usage": {"input_tokens": "many"}}, id="usage"
        ),
        pytest.param({**anthropic_message(text("x")), "content": 5}, id="content"),
        pytest.param(anthropic_message({"type": "tool_use", "id": 3, "name": "f"}), id="id"),
        pytest.param(
            anthropic_message({"type": "text", "text": ["not", "a", "string"]}), id="text"
        ),
    ],
)
async def test_a_strange_answer_is_a_malformed_response_error(
    anthropic_server: AnthropicServer, answer: dict[str, object]
) -> None:
    anthropic_server.respond(answer)
    async with make(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError):
            await llm.complete(ask())


async def test_deeply_nested_tool_input_is_a_malformed_response_error(
    anthropic_server: AnthropicServer,
) -> None:
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    body = anthropic_message(tool_use("t1", "f", {})) | {"placeholder": 0}
    raw = json.dumps(body).replace('"input": {}', f'"input": {deep}').encode()
    anthropic_server.enqueue(Scripted(body=raw))
    async with make(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError):
            await llm.complete(ask())


async def test_a_dripping_server_cannot_outlast_the_timeout(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.enqueue(Scripted(body=anthropic_message(text("slowly")), drip=0.5))
    async with make(anthropic_server, timeout=1.0, max_retries=0) as llm:
        with pytest.raises(ProviderTimeoutError):
            await llm.complete(ask())


async def test_a_node_conversation_encodes_to_alternating_turns_the_api_accepts(
    anthropic_server: AnthropicServer,
) -> None:
    calls = [ToolCall(id="t1", name="f", arguments={}), ToolCall(id="t2", name="g", arguments={})]
    conversation = [
        ChatMessage(role="user", content="[Inputs]\n- city: Lisbon"),
        ChatMessage(role="assistant", content="", tool_calls=calls),
        ChatMessage(role="tool", content="one", tool_call_id="t1"),
        ChatMessage(role="tool", content="two", tool_call_id="t2"),
        ChatMessage(role="user", content="[Judge feedback]: more detail"),
        ChatMessage(role="assistant", content=""),  # an empty turn: dropped
        ChatMessage(role="user", content="[User input]\n- ok: yes"),
    ]
    anthropic_server.respond(anthropic_message(text("fine")))
    async with make(anthropic_server) as llm:
        assert (await llm.complete(LlmRequest(messages=conversation))).text == "fine"
    sent = anthropic_server.bodies()[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "tool_result", "text", "text"]
