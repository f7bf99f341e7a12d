"""One typed settings object for both HTTP providers: key, base URL, model, name and
transport settings, given as a ProviderSettings or as keyword arguments (which override
it), resolved from the environment where unset, over a real loopback server."""

from __future__ import annotations

import pytest

from runtime import AnthropicProvider, OpenAIProvider, ProviderError, ProviderSettings
from runtime._errors import ProviderHTTPError
from runtime.providers._base import ChatMessage, LlmRequest

from .llm_servers import AnthropicServer, OpenAIServer
from .sdk_referee import anthropic_error, openai_error

pytestmark = pytest.mark.anyio


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")])


async def test_one_settings_object_serves_both_providers(
    openai_server: OpenAIServer, anthropic_server: AnthropicServer
) -> None:
    common = ProviderSettings(max_retries=1, retry_wait_initial=0.01, retry_wait_max=0.02)
    openai_server.enqueue(*[openai_error(500) for _ in range(3)])
    anthropic_server.enqueue(*[anthropic_error(529) for _ in range(3)])
    async with (
        OpenAIProvider(common, api_key=openai_server.api_key, base_url=openai_server.base_url) as o,
        AnthropicProvider(
            common, api_key=anthropic_server.api_key, base_url=anthropic_server.base_url + "/"
        ) as a,
    ):
        for llm in (o, a):
            with pytest.raises(ProviderHTTPError):
                await llm.complete(ask())
            assert llm.statistics().attempts == 2  # max_retries=1 from the shared object
    assert (o.name, a.name) == ("openai", "anthropic")
    assert a.base_url == anthropic_server.base_url  # no trailing slash
    assert a.settings.max_retries == o.settings.max_retries == 1
    assert common.api_key is None  # the object given is not changed


def test_keyword_arguments_override_the_object_and_the_environment_fills_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    base = ProviderSettings(model="gpt-5.4-mini", timeout=5.0, name="primary")
    llm = OpenAIProvider(base, timeout=7.5, max_tokens_field="max_tokens")
    assert llm.settings == ProviderSettings(
        api_key="sk-from-env",
        base_url="https://api.openai.com/v1",
        model="gpt-5.4-mini",
        name="primary",
        timeout=7.5,
    )
    assert (llm.model, llm.name, llm.max_tokens_field) == ("gpt-5.4-mini", "primary", "max_tokens")
    assert OpenAIProvider().model == "gpt-from-env"
    # The keyword form alone, as before the settings object.
    plain = AnthropicProvider(api_key="k", model="claude-x", deadline=9.0, max_tokens=100)
    assert (plain.model, plain.settings.deadline, plain.max_tokens) == ("claude-x", 9.0, 100)


def test_a_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY") as caught:
        AnthropicProvider(ProviderSettings(name="claude"))
    assert caught.value.provider == "claude"


def test_the_settings_never_show_the_key() -> None:
    settings = ProviderSettings(api_key="sk-secret-123", model="m")
    assert "sk-secret-123" not in repr(settings) and "model='m'" in repr(settings)
    assert "sk-secret-123" not in repr(OpenAIProvider(settings).settings)


def test_bad_transport_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIProvider(ProviderSettings(api_key="k", max_retries=-1))
    with pytest.raises(ValueError, match="timeout"):
        AnthropicProvider(api_key="k", timeout=0)
