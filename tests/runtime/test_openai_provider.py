"""OpenAIProvider against a real loopback HTTP server speaking chat completions."""

from __future__ import annotations

import email.utils
import re
import time

import httpx
import pytest

from runtime._errors import (
    MalformedResponseError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
)
from runtime.providers._base import ChatMessage, LlmProvider, LlmRequest, ToolCall, ToolSpec
from runtime.providers._models import DEFAULT_OPENAI_MODEL
from runtime.providers._openai import OpenAIProvider

from .llm_servers import OpenAIServer, Scripted, openai_completion
from .sdk_referee import error_fields, openai_error

pytestmark = pytest.mark.anyio

WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def make(server: OpenAIServer, **kwargs: object) -> OpenAIProvider:
    options: dict[str, object] = {
        "api_key": server.api_key,
        "base_url": server.base_url,
        "retry_wait_initial": 0.01,
        "retry_wait_max": 0.05,
    }
    options.update(kwargs)
    return OpenAIProvider(**options)  # type: ignore[arg-type]


def ask(text: str = "Hello", **kwargs: object) -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content=text)], **kwargs)  # type: ignore[arg-type]


async def test_plain_text_answer_and_wire_format(openai_server: OpenAIServer) -> None:
    openai_server.respond(openai_completion("Hi there", prompt_tokens=21, completion_tokens=3))
    async with make(openai_server, model="gpt-test") as llm:
        assert isinstance(llm, LlmProvider)
        answer = await llm.complete(ask(system="Be brief.", temperature=0.2, max_tokens=50))
    assert answer.text == "Hi there"
    assert answer.tool_calls == []
    assert answer.usage.input_tokens == 21 and answer.usage.output_tokens == 3
    assert answer.stop_reason == "stop"
    assert answer.model == "gpt-4o-mini-2024-07-18"
    assert answer.latency_ms > 0
    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {openai_server.api_key}"
    assert request.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        "max_completion_tokens": 50,
        "temperature": 0.2,
    }


async def test_request_model_overrides_default_and_json_mode(openai_server: OpenAIServer) -> None:
    openai_server.respond(openai_completion('{"a": 1}'))
    async with make(openai_server) as llm:
        await llm.complete(ask(model="gpt-other", json_response=True))
    body = openai_server.requests[0].body
    assert body["model"] == "gpt-other"
    assert body["response_format"] == {"type": "json_object"}
    assert "tools" not in body and "temperature" not in body


async def test_tool_calls_round_trip(openai_server: OpenAIServer) -> None:
    openai_server.respond(
        openai_completion(
            None,
            tool_calls=[
                ("call_a", "get_weather", '{"city": "Lisbon"}'),
                ("call_b", "get_weather", '{"city": "Porto"}'),
            ],
        )
    )
    openai_server.respond(openai_completion("Sunny in both."))
    async with make(openai_server) as llm:
        first = await llm.complete(ask("Weather?", tools=[WEATHER], tool_choice="auto"))
        assert first.text == ""
        assert first.stop_reason == "tool_calls"
        assert first.tool_calls == [
            ToolCall(id="call_a", name="get_weather", arguments={"city": "Lisbon"}),
            ToolCall(id="call_b", name="get_weather", arguments={"city": "Porto"}),
        ]
        history = [
            ChatMessage(role="user", content="Weather?"),
            ChatMessage(role="assistant", content=first.text, tool_calls=first.tool_calls),
            ChatMessage(role="tool", tool_call_id="call_a", name="get_weather", content="21C"),
            ChatMessage(role="tool", tool_call_id="call_b", name="get_weather", content="19C"),
        ]
        second = await llm.complete(LlmRequest(messages=history, tools=[WEATHER]))
    assert second.text == "Sunny in both."
    sent_tools = openai_server.requests[0].body["tools"]
    assert sent_tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert openai_server.requests[0].body["tool_choice"] == "auto"
    messages = openai_server.requests[1].body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'},
            },
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "21C"}
    assert messages[3] == {"role": "tool", "tool_call_id": "call_b", "content": "19C"}


async def test_named_tool_choice_is_a_function_object(openai_server: OpenAIServer) -> None:
    openai_server.respond(openai_completion("ok"))
    async with make(openai_server) as llm:
        await llm.complete(ask(tools=[WEATHER], tool_choice="get_weather"))
    assert openai_server.requests[0].body["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


async def test_usage_accumulates_in_statistics(openai_server: OpenAIServer) -> None:
    openai_server.respond(openai_completion("a", prompt_tokens=5, completion_tokens=2))
    openai_server.respond(openai_completion("b", prompt_tokens=7, completion_tokens=4))
    async with make(openai_server) as llm:
        await llm.complete(ask())
        await llm.complete(ask())
        stats = llm.statistics()
    assert (stats.calls, stats.attempts, stats.retries, stats.failures) == (2, 2, 0, 0)
    assert (stats.input_tokens, stats.output_tokens) == (12, 6)


async def test_429_with_retry_after_seconds_is_retried_and_honoured(
    openai_server: OpenAIServer,
) -> None:
    openai_server.enqueue(openai_error(429, "Rate limit reached", headers={"retry-after": "0.3"}))
    openai_server.respond(openai_completion("after the wait"))
    async with make(openai_server, retry_wait_max=5.0) as llm:
        answer = await llm.complete(ask())
        stats = llm.statistics()
    assert answer.text == "after the wait"
    assert len(openai_server.requests) == 2
    assert stats.retries == 1
    # The wait came from Retry-After (0.3 s), not from the 0.01 s backoff.
    assert stats.retry_wait_s == pytest.approx(0.3)


async def test_retry_after_http_date_is_capped_by_retry_wait_max(
    openai_server: OpenAIServer,
) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    openai_server.enqueue(openai_error(429, "slow down", headers={"retry-after": later}))
    openai_server.respond(openai_completion("ok"))
    async with make(openai_server, retry_wait_max=0.05) as llm:
        assert (await llm.complete(ask())).text == "ok"
        assert llm.statistics().retry_wait_s == pytest.approx(0.05)
    assert len(openai_server.requests) == 2


async def test_500_then_success(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(openai_error(500, "boom"))
    openai_server.enqueue(Scripted(status=503, body=b"upstream unavailable"))
    openai_server.respond(openai_completion("recovered"))
    async with make(openai_server) as llm:
        assert (await llm.complete(ask())).text == "recovered"
        assert llm.statistics().retries == 2
    assert len(openai_server.requests) == 3


async def test_500_forever_fails_after_all_attempts(openai_server: OpenAIServer) -> None:
    answers = [openai_error(500, "server melted") for _ in range(10)]
    openai_server.enqueue(*answers)
    async with make(openai_server, max_retries=2) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
        assert llm.statistics().failures == 1
    assert len(openai_server.requests) == 3  # the first attempt and two retries
    assert caught.value.status == 500
    assert caught.value.retryable is True
    assert "server melted" in str(caught.value)
    err = caught.value  # the third answer's
    assert (err.error_type, err.code, err.request_id) == error_fields(answers[2])
    assert err.error_type == "server_error"


async def test_400_is_not_retried_and_carries_the_api_message(
    openai_server: OpenAIServer,
) -> None:
    refused = openai_error(400, "Invalid 'messages[0].role'")
    openai_server.enqueue(refused)
    async with make(openai_server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    assert len(openai_server.requests) == 1
    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert "Invalid 'messages[0].role'" in caught.value.reason
    err = caught.value
    assert (err.error_type, err.code, err.request_id) == error_fields(refused)
    assert err.code == "unsupported_parameter"


async def test_wrong_api_key_is_a_401_at_once(openai_server: OpenAIServer) -> None:
    async with make(openai_server, api_key="wrong") as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    assert caught.value.status == 401
    assert "Incorrect API key" in str(caught.value)
    assert len(openai_server.requests) == 1


async def test_slow_answer_times_out_is_retried_then_fails(openai_server: OpenAIServer) -> None:
    for _ in range(2):
        openai_server.enqueue(Scripted(body=openai_completion("too late"), delay=5.0))
    async with make(openai_server, timeout=0.2, max_retries=1) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
        assert llm.statistics().attempts == 2
    assert len(openai_server.requests) == 2
    assert caught.value.retryable is True


async def test_slow_answer_then_fast_answer_succeeds(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(Scripted(body=openai_completion("too late"), delay=5.0))
    openai_server.respond(openai_completion("in time"))
    async with make(openai_server, timeout=0.2) as llm:
        assert (await llm.complete(ask())).text == "in time"
    assert len(openai_server.requests) == 2


async def test_connection_refused_is_retried_then_a_provider_error() -> None:
    closed = OpenAIServer()  # bound, never started: take its port then close it
    port = closed.port
    closed.close()
    llm = OpenAIProvider(
        api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_wait_initial=0.01
    )
    async with llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask())
        assert llm.statistics().attempts == 2
    assert caught.value.retryable is True
    assert "connection failed" in caught.value.reason


async def test_malformed_json_body_is_not_retried(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(Scripted(body=b"{not json"))
    async with make(openai_server) as llm:
        with pytest.raises(MalformedResponseError) as caught:
            await llm.complete(ask())
    assert len(openai_server.requests) == 1
    assert "not JSON" in caught.value.reason


async def test_missing_choices_is_malformed(openai_server: OpenAIServer) -> None:
    openai_server.respond({"id": "x", "object": "chat.completion"})
    async with make(openai_server) as llm:
        with pytest.raises(MalformedResponseError, match="choices"):
            await llm.complete(ask())


async def test_an_answer_that_cannot_be_read_counts_as_a_failure(
    openai_server: OpenAIServer,
) -> None:
    # A 2xx body that is JSON but not a chat completion fails while it is parsed, after
    # the HTTP exchange: it is a failed call like an HTTP error, not a success.
    openai_server.respond({"id": "x", "object": "chat.completion"})
    openai_server.enqueue(Scripted(body=b"{not json"))
    openai_server.respond(openai_completion("fine", prompt_tokens=3, completion_tokens=2))
    async with make(openai_server) as llm:
        for _ in range(2):
            with pytest.raises(MalformedResponseError):
                await llm.complete(ask())
        assert (await llm.complete(ask())).text == "fine"
        stats = llm.statistics()
    assert (stats.calls, stats.attempts, stats.failures) == (3, 3, 2)
    assert (stats.input_tokens, stats.output_tokens) == (3, 2)


async def test_broken_tool_arguments_are_kept_with_their_call(openai_server: OpenAIServer) -> None:
    # The call's error, not the answer's: the node tells the model (see
    # test_unreadable_tool_arguments.py).
    openai_server.respond(
        openai_completion(None, tool_calls=[("call_1", "get_weather", '{"city": "Lis')])
    )
    async with make(openai_server) as llm:
        answer = await llm.complete(ask(tools=[WEATHER]))
    [call] = answer.tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("get_weather", {}, '{"city": "Lis')
    assert len(openai_server.requests) == 1


async def test_a_lone_surrogate_escape_reads_as_a_replacement_character(
    openai_server: OpenAIServer,
) -> None:
    # JSON's "\\ud800" is half a surrogate pair: text no log can store (not UTF-8). The
    # LLM node recording such a turn crashed with UnicodeEncodeError.
    body = (
        b'{"model": "m", "choices": [{"message": {"role": "assistant", "content": '
        b'"half \\ud83d here \\ud83d\\ude00", "tool_calls": [{"id": "c1", "type": '
        b'"function", "function": {"name": "get_weather", '
        b'"arguments": "{\\"city\\": \\"Lis\\\\udc00\\"}"}}]}}]}'
    )
    openai_server.enqueue(Scripted(body=body))
    async with make(openai_server) as llm:
        answer = await llm.complete(ask(tools=[WEATHER]))
    assert answer.text == "half \ufffd here \U0001f600"
    assert answer.tool_calls[0].arguments == {"city": "Lis\ufffd"}


async def test_tool_arguments_that_are_not_an_object_are_kept_as_text(
    openai_server: OpenAIServer,
) -> None:
    openai_server.respond(openai_completion(None, tool_calls=[("c", "get_weather", "[1, 2]")]))
    async with make(openai_server) as llm:
        answer = await llm.complete(ask(tools=[WEATHER]))
    assert answer.tool_calls == [
        ToolCall(id="c", name="get_weather", arguments={}, raw_arguments="[1, 2]")
    ]


async def test_configuration_from_environment(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, no_provider_env: None
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", openai_server.api_key)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url + "/")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    openai_server.respond(openai_completion("from env"))
    async with OpenAIProvider() as llm:
        assert llm.model == "env-model"
        assert (await llm.complete(ask())).text == "from env"
    assert openai_server.requests[0].body["model"] == "env-model"


async def test_defaults_without_environment(
    monkeypatch: pytest.MonkeyPatch, no_provider_env: None
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    async with OpenAIProvider() as llm:
        assert llm.base_url == "https://api.openai.com/v1"
        assert llm.model == DEFAULT_OPENAI_MODEL


async def test_missing_api_key_fails_at_construction(no_provider_env: None) -> None:
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        OpenAIProvider()


async def test_given_http_client_is_used_and_not_closed(openai_server: OpenAIServer) -> None:
    openai_server.respond(openai_completion("shared"))
    async with httpx.AsyncClient(headers={"x-app": "magistrate-test"}) as client:
        async with make(openai_server, http_client=client) as llm:
            assert (await llm.complete(ask())).text == "shared"
        assert not client.is_closed
    assert openai_server.requests[0].headers["x-app"] == "magistrate-test"


# --- answers a real API would never send, and servers that misbehave ---------------------


async def test_max_tokens_is_sent_as_max_completion_tokens_only_when_asked(
    openai_server: OpenAIServer,
) -> None:
    for _ in range(3):
        openai_server.respond(openai_completion("ok"))
    # A chat model: reasoning models always take max_completion_tokens.
    async with make(openai_server, model="gpt-4.1") as llm:
        await llm.complete(ask())
        await llm.complete(ask(max_tokens=77))
    async with make(openai_server, model="gpt-4.1", max_tokens_field="max_tokens") as older:
        await older.complete(ask(max_tokens=77))
    unasked, asked, old_name = openai_server.bodies()
    assert "max_tokens" not in unasked and "max_completion_tokens" not in unasked
    assert asked["max_completion_tokens"] == 77 and "max_tokens" not in asked
    assert old_name["max_tokens"] == 77 and "max_completion_tokens" not in old_name


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({**openai_completion("x"), "usage": {"prompt_tokens": "many"}}, id="usage"),
        pytest.param(
            {
                **openai_completion("x"),
                "choices": [{"message": {"role": "assistant", "tool_calls": 5}}],
            },
            id="tool_calls",
        ),
        pytest.param(
            openai_completion("", tool_calls=[("c1", "f", '{"a": 1}')])
            | {"choices": [{"message": {"tool_calls": [{"id": 7, "function": {"name": "f"}}]}}]},
            id="id",
        ),
    ],
)
async def test_a_strange_answer_is_a_malformed_response_error(
    openai_server: OpenAIServer, answer: dict[str, object]
) -> None:
    openai_server.respond(answer)
    async with make(openai_server) as llm:
        with pytest.raises(MalformedResponseError):
            await llm.complete(ask())


async def test_a_deeply_nested_body_is_a_malformed_response_error(
    openai_server: OpenAIServer,
) -> None:
    openai_server.enqueue(Scripted(body=nested(5000).encode()))
    async with make(openai_server) as llm:
        with pytest.raises(MalformedResponseError):
            await llm.complete(ask())


async def test_a_dripping_server_cannot_outlast_the_timeout(openai_server: OpenAIServer) -> None:
    # One byte every half second: every read is quick, the answer never completes in time.
    openai_server.enqueue(Scripted(body=openai_completion("slowly"), drip=0.5))
    async with make(openai_server, timeout=1.0, max_retries=0) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
    assert "no complete answer within 1.0s" in caught.value.reason


async def test_the_deadline_bounds_the_call_with_its_retries(openai_server: OpenAIServer) -> None:
    async with make(
        openai_server, deadline=0.3, max_retries=1000, retry_wait_initial=0.02, retry_wait_max=0.02
    ) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())  # the server answers 500 to every attempt
    assert "deadline of 0.3s" in caught.value.reason
    assert 1 < len(openai_server.requests) < 1000


async def test_a_retry_after_past_the_deadline_says_so(openai_server: OpenAIServer) -> None:
    # Waiting out 30 s would only end in "no answer within the deadline", hiding the 429.
    openai_server.enqueue(
        Scripted(
            status=429,
            body={"error": {"message": "Rate limit reached"}},
            headers={"retry-after": "30"},
        )
    )
    openai_server.respond(openai_completion("never asked for"))
    async with make(openai_server, deadline=2.0, retry_wait_max=60.0) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
        stats = llm.statistics()
    assert caught.value.reason == (
        "the provider asked to retry after 30s, past the call's deadline of 2.0s "
        "(Rate limit reached)"
    )
    assert caught.value.status == 429
    assert isinstance(caught.value.__cause__, ProviderHTTPError)
    assert (stats.attempts, stats.retries, stats.failures) == (1, 0, 1)
    assert len(openai_server.requests) == 1


async def test_a_retry_after_past_the_deadline_ends_the_call_though_the_wait_is_capped(
    openai_server: OpenAIServer,
) -> None:
    # The wait would be capped at 1 s, but a retry before the 30 s asked for is refused
    # again: the call cannot be answered within its deadline either way.
    openai_server.enqueue(
        Scripted(status=429, body={"error": {"message": "later"}}, headers={"retry-after": "30"})
    )
    openai_server.respond(openai_completion("never asked for"))
    async with make(openai_server, deadline=5.0, retry_wait_max=1.0) as llm:
        with pytest.raises(ProviderTimeoutError, match="asked to retry after 30s"):
            await llm.complete(ask())
    assert len(openai_server.requests) == 1


async def test_a_retry_after_within_the_deadline_is_waited_for(
    openai_server: OpenAIServer,
) -> None:
    openai_server.enqueue(
        Scripted(
            status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "0.1"}
        )
    )
    openai_server.respond(openai_completion("after the wait"))
    async with make(openai_server, deadline=30.0, retry_wait_max=5.0) as llm:
        assert (await llm.complete(ask())).text == "after the wait"
        assert llm.statistics().retries == 1


async def test_a_backoff_past_the_deadline_ends_the_call_with_the_last_error(
    openai_server: OpenAIServer,
) -> None:
    # The backoff after a 503 is 2.5-5 s: sleeping it out would only end in "no answer
    # within the deadline", hiding the 503.
    openai_server.enqueue(Scripted(status=503, body={"error": {"message": "overloaded"}}))
    openai_server.respond(openai_completion("never asked for"))
    async with make(openai_server, deadline=1.0, retry_wait_initial=5.0, retry_wait_max=5.0) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
        stats = llm.statistics()
    assert re.fullmatch(
        r"the next retry would come after [2-5](\.\d+)?s, past the call's deadline of 1\.0s "
        r"\(overloaded\)",
        caught.value.reason,
    ), caught.value.reason
    assert caught.value.status == 503
    assert str(caught.value).startswith("openai (HTTP 503): the next retry would come after")
    assert isinstance(caught.value.__cause__, ProviderHTTPError)
    assert (stats.attempts, stats.retries, stats.failures) == (1, 0, 1)
    assert len(openai_server.requests) == 1


async def test_a_backoff_past_the_deadline_after_a_refused_connection_names_it() -> None:
    closed = OpenAIServer()  # bound, never started: take its port then close it
    port = closed.port
    closed.close()
    llm = OpenAIProvider(
        api_key="k",
        base_url=f"http://127.0.0.1:{port}/v1",
        deadline=1.0,
        retry_wait_initial=5.0,
        retry_wait_max=5.0,
    )
    async with llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
        assert llm.statistics().attempts == 1
    assert caught.value.status is None
    assert caught.value.reason.startswith("the next retry would come after ")
    assert "past the call's deadline of 1.0s (connection failed calling" in caught.value.reason


async def test_a_backoff_within_the_deadline_is_waited_for(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(Scripted(status=503, body={"error": {"message": "overloaded"}}))
    openai_server.respond(openai_completion("after the backoff"))
    async with make(openai_server, deadline=30.0, retry_wait_initial=0.05) as llm:
        assert (await llm.complete(ask())).text == "after the backoff"
        assert llm.statistics().retries == 1
    assert len(openai_server.requests) == 2
