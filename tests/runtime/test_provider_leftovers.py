"""The HTTP providers where a server's word is easy to misread: a ``Retry-After`` of 0 (a
wait of none, not a reason to retry at once), a 429 that is a billing state and no rate
limit, a ``base_url`` holding a query (Azure's ``?api-version=...``), and an answer that
cannot be read (its request id is what the provider's support asks for). Over real
loopback HTTP; no assertion on time, only on attempts, recorded waits, the URL the
server saw and the error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from runtime._errors import MalformedResponseError, ProviderHTTPError
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._openai import OpenAIProvider

from .llm_servers import (
    AnthropicServer,
    OpenAIServer,
    Received,
    Scripted,
    anthropic_message,
    openai_completion,
    text,
)

pytestmark = pytest.mark.anyio

QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing "
        "details. For more information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")])


def openai(server: OpenAIServer, **kwargs: Any) -> OpenAIProvider:
    options: dict[str, Any] = {
        "api_key": server.api_key,
        "base_url": server.base_url,
        "retry_wait_initial": 0.01,
        "retry_wait_max": 0.05,
    }
    options.update(kwargs)
    return OpenAIProvider(**options)


def anthropic(server: AnthropicServer, **kwargs: Any) -> AnthropicProvider:
    options: dict[str, Any] = {
        "api_key": server.api_key,
        "base_url": server.base_url,
        "retry_wait_initial": 0.01,
        "retry_wait_max": 0.05,
    }
    options.update(kwargs)
    return AnthropicProvider(**options)


# -- a wait of none asked for --------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        {"retry-after": "0"},
        {"retry-after-ms": "0"},
        {"retry-after": "-3"},
        {"retry-after-ms": "-100"},
        {"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"},
    ],
)
async def test_a_retry_after_of_no_wait_backs_off_instead_of_retrying_at_once(
    openai_server: OpenAIServer, header: dict[str, str]
) -> None:
    limited = Scripted(status=429, body={"error": {"message": "slow down"}}, headers=header)
    openai_server.enqueue(limited, Scripted(body=openai_completion("fine")))
    async with openai(openai_server) as llm:
        assert (await llm.complete(ask())).text == "fine"
        stats = llm.statistics()
    # The SDKs take a wait of 0 or less as none asked for, and back off: here from
    # retry_wait_initial (0.01 s, jittered over its upper half), never 0.
    assert stats.retries == 1
    assert 0.005 <= stats.retry_wait_s <= 0.01


async def test_a_retry_after_ms_of_zero_leaves_the_retry_after_to_decide(
    anthropic_server: AnthropicServer,
) -> None:
    limited = Scripted(
        status=529,
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        headers={"retry-after-ms": "0", "retry-after": "0.03"},
    )
    anthropic_server.enqueue(limited, Scripted(body=anthropic_message(text("fine"))))
    async with anthropic(anthropic_server, retry_wait_initial=5.0, retry_wait_max=5.0) as llm:
        assert (await llm.complete(ask())).text == "fine"
        assert llm.statistics().retry_wait_s == pytest.approx(0.03)


# -- a billing state is no rate limit ------------------------------------------------------


async def test_a_429_of_insufficient_quota_fails_at_once_naming_the_code(
    openai_server: OpenAIServer,
) -> None:
    openai_server.enqueue(
        Scripted(status=429, body=QUOTA, headers={"x-request-id": "req_quota"}),
        Scripted(body=openai_completion("never reached")),
    )
    async with openai(openai_server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
        stats = llm.statistics()
    error = caught.value
    # The official SDKs retry it: each retry waits, and the quota is still spent.
    assert len(openai_server.requests) == 1 and stats.retries == 0
    assert not error.retryable
    assert (error.status, error.code, error.request_id) == (429, "insufficient_quota", "req_quota")
    assert "insufficient_quota: check your plan and billing" in str(error)
    assert "You exceeded your current quota" in str(error) and "req_quota" in str(error)


async def test_a_billing_error_sent_with_a_429_fails_at_once(
    anthropic_server: AnthropicServer,
) -> None:
    billing = {
        "type": "error",
        "error": {"type": "billing_error", "message": "Your credit balance is too low."},
    }
    anthropic_server.enqueue(
        Scripted(status=429, body=billing), Scripted(body=anthropic_message(text("no")))
    )
    async with anthropic(anthropic_server) as llm:
        with pytest.raises(ProviderHTTPError) as caught:
            await llm.complete(ask())
    assert len(anthropic_server.requests) == 1 and not caught.value.retryable
    assert "billing_error: check your plan and billing" in str(caught.value)


# -- a base_url with a query ---------------------------------------------------------------


class _QueryOpenAI(OpenAIServer):
    """Routes on the path alone, as a real API does, keeping the query it was sent."""

    def check(self, request: Received) -> Scripted | None:
        return super().check(replace(request, path=request.path.partition("?")[0]))


class _QueryAnthropic(AnthropicServer):
    def check(self, request: Received) -> Scripted | None:
        return super().check(replace(request, path=request.path.partition("?")[0]))


@pytest.fixture
def query_openai() -> Iterator[OpenAIServer]:
    server = _QueryOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def query_anthropic() -> Iterator[AnthropicServer]:
    server = _QueryAnthropic()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("slash", ["", "/"])
async def test_a_base_url_with_a_query_gets_the_path_before_the_query(
    query_openai: OpenAIServer, slash: str
) -> None:
    query_openai.respond(openai_completion("fine"))
    base_url = f"{query_openai.base_url}{slash}?api-version=2024-10-21"
    async with openai(query_openai, base_url=base_url) as llm:
        assert (await llm.complete(ask())).text == "fine"
    assert query_openai.requests[0].path == "/v1/chat/completions?api-version=2024-10-21"


async def test_an_anthropic_base_url_with_a_query_keeps_it(
    query_anthropic: AnthropicServer,
) -> None:
    query_anthropic.respond(anthropic_message(text("fine")))
    base_url = f"{query_anthropic.base_url}/?tenant=a&region=eu"
    async with anthropic(query_anthropic, base_url=base_url) as llm:
        assert (await llm.complete(ask())).text == "fine"
    assert query_anthropic.requests[0].path == "/v1/messages?tenant=a&region=eu"


# -- an answer that cannot be read names its request -------------------------------------


async def test_an_unreadable_openai_answer_carries_its_request_id(
    openai_server: OpenAIServer,
) -> None:
    broken = {"id": "chatcmpl-x", "choices": "nope", "usage": {"prompt_tokens": 3}}
    openai_server.respond(broken, headers={"x-request-id": "req_abc123"})
    async with openai(openai_server) as llm:
        with pytest.raises(MalformedResponseError) as caught:
            await llm.complete(ask())
    error = caught.value
    assert error.request_id == "req_abc123"
    assert "request req_abc123" in str(error)  # as a ProviderHTTPError shows it


async def test_an_unreadable_anthropic_answer_carries_its_request_id_and_cost(
    anthropic_server: AnthropicServer,
) -> None:
    broken = {"type": "message", "content": 5, "usage": {"input_tokens": 4, "output_tokens": 2}}
    anthropic_server.respond(broken, headers={"request-id": "req_011ABC"})
    async with anthropic(anthropic_server) as llm:
        with pytest.raises(MalformedResponseError) as caught:
            await llm.complete(ask())
    error = caught.value
    assert error.request_id == "req_011ABC" and "request req_011ABC" in str(error)
    assert error.usage is not None  # the paid tokens still travel with it


@pytest.mark.parametrize("body", [b"<html>oops</html>", b"[1, 2]"])
async def test_an_answer_that_is_no_json_object_carries_its_request_id(
    openai_server: OpenAIServer, body: bytes
) -> None:
    openai_server.respond(body, headers={"x-request-id": "req_raw"})
    async with openai(openai_server) as llm:
        with pytest.raises(MalformedResponseError) as caught:
            await llm.complete(ask())
    assert caught.value.request_id == "req_raw" and "request req_raw" in str(caught.value)
