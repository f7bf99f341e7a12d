"""Fixtures for the runtime tests: loopback LLM API servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .llm_servers import AnthropicServer, OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    server = OpenAIServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    server = AnthropicServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear the provider environment variables so a developer's shell cannot leak in."""
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ):
        monkeypatch.delenv(var, raising=False)
