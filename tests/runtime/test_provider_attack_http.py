"""The HTTP providers against loopback servers that misbehave: an error object sent with
status 200, a redirect, an HTML error page, an answer that cannot be read but was paid
for, usage of the wrong shape, a connection reset in the middle of the body, waits asked
for that are absurd. Each ends in a typed ProviderError that says the cause, retried
only when a retry may help, with bounded waits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import Runtime
from runtime._errors import (
    MalformedResponseError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
)
from runtime.events import NodeFailed
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._openai import OpenAIProvider

from .llm_servers import (
    AnthropicServer,
    LlmServer,
    OpenAIServer,
    Scripted,
    anthropic_message,
    openai_completion,
    text,
)
from .test_llm_node import graph, llm, of

pytestmark = pytest.mark.anyio

HTML = (
    b"<html><head><title>502 Bad Gateway</title><style>body{color:red}</style></head>"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>"
)


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")])


def openai(server: OpenAIServer, **kwargs: Any) -> OpenAIProvider:
    options: dict[str, Any] = {"retry_wait_initial": 0.01, "retry_wait_max": 0.05}
    options.update(kwargs)
    return OpenAIProvider(api_key=server.api_key, base_url=server.base_url, **options)


def anthropic(server: AnthropicServer, **kwargs: Any) -> AnthropicProvider:
    options: dict[str, Any] = {"retry_wait_initial": 0.01, "retry_wait_max": 0.05}
    options.update(kwargs)
    return AnthropicProvider(api_key=server.api_key, base_url=server.base_url, **options)


#: (server fixture, provider factory, a good answer: it reads as the text "fine")
Case = tuple[str, Callable[..., Any], Callable[[], dict[str, Any]]]
CASES: list[Case] = [
    ("openai_server", openai, lambda: openai_completion("fine")),
    ("anthropic_server", anthropic, lambda: anthropic_message(text("fine"))),
]


@pytest.fixture(params=CASES, ids=["openai", "anthropic"])
def case(request: pytest.FixtureRequest) -> tuple[LlmServer, Callable[..., Any], dict[str, Any]]:
    fixture, make, good = request.param
    server: LlmServer = request.getfixturevalue(fixture)
    return server, make, good()


# -- an error object sent with status 200 -------------------------------------------------


async def test_an_openai_error_body_with_status_200_says_the_providers_message(
    openai_server: OpenAIServer,
) -> None:
    quota = {
        "error": {
            "message": "You exceeded your current quota, please check your plan.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    openai_server.respond(quota, headers={"x-request-id": "req_42"})
    async with openai(openai_server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    # Before: MalformedResponseError "response has no 'choices' field", hiding the cause.
    error = caught.value
    assert "You exceeded your current quota" in error.reason
    assert (error.status, error.code, error.request_id) == (200, "insufficient_quota", "req_42")
    assert not error.retryable and len(openai_server.requests) == 1


async def test_a_passing_error_sent_with_status_200_is_retried(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]],
) -> None:
    server, make, good = case
    passing = (
        {"error": {"message": "The server had an error", "type": "server_error"}}
        if isinstance(server, OpenAIServer)
        else {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    server.enqueue(Scripted(body=passing), Scripted(body=good))
    async with make(server) as llm:
        assert (await llm.complete(ask())).text == "fine"
        stats = llm.statistics()
    assert (stats.attempts, stats.retries, stats.failures) == (2, 1, 0)


async def test_an_anthropic_overloaded_body_with_status_200_fails_as_overloaded(
    anthropic_server: AnthropicServer,
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    anthropic_server.enqueue(*[Scripted(body=overloaded)] * 3)
    async with anthropic(anthropic_server, max_retries=2) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    error = caught.value
    assert (error.status, error.error_type, error.retryable) == (200, "overloaded_error", True)
    assert "Overloaded" in str(error) and len(anthropic_server.requests) == 3


async def test_a_node_whose_model_answers_an_error_with_200_fails_saying_why(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    refused = {"error": {"message": "Your organization must be verified", "type": "invalid"}}
    openai_server.respond(refused)
    provider = openai(openai_server)
    async with Runtime(tmp_path / "run.db", provider=provider) as rt:
        handle = await rt.start(graph([llm("n", output_keys=["a"])]))
        result = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    await provider.aclose()
    assert result.status == "failed"
    [failed] = of(events, NodeFailed)
    assert failed.error_type == "ProviderHTTPError"
    assert "Your organization must be verified" in failed.error


# -- redirects and HTML pages -------------------------------------------------------------


async def test_a_redirect_is_an_error_naming_where_it_leads(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]],
) -> None:
    server, make, _ = case
    moved = Scripted(
        status=301,
        body=b"<html><body>Moved Permanently</body></html>",
        headers={"content-type": "text/html", "location": "https://api.example.com/v1/x"},
    )
    server.enqueue(moved)
    async with make(server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    # Before: MalformedResponseError "response body is not JSON: '<html>...'".
    error = caught.value
    assert error.status == 301 and not error.retryable
    assert "redirected to 'https://api.example.com/v1/x'" in error.reason
    assert "base_url" in error.reason and len(server.requests) == 1


async def test_an_html_error_page_is_shown_by_its_words(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]],
) -> None:
    server, make, _ = case
    page = Scripted(status=502, body=HTML, headers={"content-type": "text/html"})
    server.enqueue(page, page, Scripted(body=HTML, headers={"content-type": "text/html"}))
    async with make(server, max_retries=1) as llm:
        with pytest.raises(ProviderHTTPError) as failed:
            await llm.complete(ask())  # 502 twice: retried, then its error
        with pytest.raises(MalformedResponseError) as unread:
            await llm.complete(ask())  # 200 with the page: not retried
    assert failed.value.reason == "502 Bad Gateway 502 Bad Gateway nginx"
    assert failed.value.retryable and failed.value.status == 502
    assert (
        unread.value.reason == "response body is not JSON: '502 Bad Gateway 502 Bad Gateway nginx'"
    )
    assert len(server.requests) == 3


# -- usage --------------------------------------------------------------------------------


async def test_the_tokens_of_an_answer_that_cannot_be_read_still_count(
    openai_server: OpenAIServer,
) -> None:
    broken = openai_completion("", prompt_tokens=30, completion_tokens=9)
    broken["choices"][0]["message"]["tool_calls"] = "search"  # not a list
    openai_server.respond(broken)
    async with openai(openai_server) as llm:
        with pytest.raises(MalformedResponseError, match="tool_calls is not a list"):
            await llm.complete(ask())
        stats = llm.statistics()
    assert stats.failures == 1
    assert (stats.input_tokens, stats.output_tokens) == (30, 9)  # billed; before: (0, 0)


@pytest.mark.parametrize("usage", ["lots", [10, 5], 15])
async def test_usage_that_is_not_an_object_is_malformed(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]], usage: object
) -> None:
    server, make, good = case
    server.respond({**good, "usage": usage})
    async with make(server) as llm:
        # Before: read as no usage at all, the answer's tokens silently 0.
        with pytest.raises(MalformedResponseError, match="usage is not an object"):
            await llm.complete(ask())


@pytest.mark.parametrize("count", [-1, 2.5, "7", True])
async def test_a_token_count_that_is_no_count_is_malformed(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]], count: object
) -> None:
    server, make, good = case
    field = "completion_tokens" if isinstance(server, OpenAIServer) else "output_tokens"
    server.respond({**good, "usage": {**good["usage"], field: count}})
    async with make(server) as llm:
        with pytest.raises(MalformedResponseError, match=f"usage field '{field}'"):
            await llm.complete(ask())
    assert len(server.requests) == 1


# -- the connection and the waits ---------------------------------------------------------


async def test_a_connection_reset_in_the_middle_of_the_body_is_retried(
    case: tuple[LlmServer, Callable[..., Any], dict[str, Any]],
) -> None:
    server, make, good = case
    server.enqueue(Scripted(body=good, reset_after=20), Scripted(body=good))
    async with make(server) as llm:
        assert (await llm.complete(ask())).text == "fine"
    server.enqueue(*[Scripted(body=good, reset_after=20)] * 2)
    async with make(server, max_retries=1) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask())
    assert caught.value.retryable and "connection failed" in caught.value.reason
    assert len(server.requests) == 4


@pytest.mark.parametrize(
    "header",
    [
        {"retry-after": "1e400"},
        {"retry-after-ms": "inf"},
        {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"},
    ],
)
async def test_an_absurd_retry_after_ends_the_call_at_once_within_a_deadline(
    openai_server: OpenAIServer, header: dict[str, str]
) -> None:
    limited = Scripted(status=429, body={"error": {"message": "slow down"}}, headers=header)
    openai_server.enqueue(limited, Scripted(body=openai_completion("fine")))
    async with openai(openai_server, deadline=30.0) as llm:
        with pytest.raises(ProviderTimeoutError) as caught:
            await llm.complete(ask())
    assert caught.value.status == 429 and "slow down" in caught.value.reason
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize("wait", ["1e400", "-5", "nan", "soon"])
async def test_an_absurd_retry_after_without_a_deadline_waits_at_most_retry_wait_max(
    openai_server: OpenAIServer, wait: str
) -> None:
    limited = Scripted(
        status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": wait}
    )
    openai_server.enqueue(limited, Scripted(body=openai_completion("fine")))
    async with openai(openai_server) as llm:
        assert (await llm.complete(ask())).text == "fine"
        stats = llm.statistics()
    assert stats.retries == 1 and 0.0 <= stats.retry_wait_s <= 0.05
