"""Fixtures for the runtime tests: loopback LLM API servers, a store on either backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..pgsupport import drop_schemas, fresh_prefix, pg_url
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


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store on each backend: a SQLite file, then a fresh PostgreSQL schema (dropped
    after the test). A test module may define its own ``store`` instead."""
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_store"
    drop_schemas(prefix)
