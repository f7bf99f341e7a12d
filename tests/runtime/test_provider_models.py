"""Default models and per-model request shaping (runtime/providers/_models.py), with the
official SDKs' model lists as referee, over a real loopback server."""

from __future__ import annotations

import inspect
import pathlib
import re
import typing

import anthropic.types
import openai.types
import openai.types.shared.chat_model
import pytest

from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._models import DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL
from runtime.providers._openai import OpenAIProvider

from .llm_servers import AnthropicServer, OpenAIServer, anthropic_message, openai_completion, text

pytestmark = pytest.mark.anyio


def ask(**kwargs: object) -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")], **kwargs)  # type: ignore[arg-type]


def _literal_values(alias: object) -> set[str]:
    values: set[str] = set()
    for arg in typing.get_args(alias):
        values |= set(typing.get_args(arg)) if typing.get_origin(arg) is typing.Literal else set()
    return values or set(typing.get_args(alias))


def test_defaults_are_current_models_of_the_sdks() -> None:
    assert DEFAULT_ANTHROPIC_MODEL in _literal_values(anthropic.types.Model)
    assert DEFAULT_OPENAI_MODEL in set(typing.get_args(openai.types.ChatModel))
    # The SDK lists the models with an announced shutdown after the type.
    deprecated = inspect.getsource(openai.types.shared.chat_model).split("Deprecated values")[1]
    assert f'"{DEFAULT_OPENAI_MODEL}"' not in deprecated
    assert "claude-3-5-haiku-latest" not in _literal_values(anthropic.types.Model)


async def test_current_anthropic_models_get_no_temperature_and_room_to_think(
    anthropic_server: AnthropicServer,
) -> None:
    for _ in range(2):
        anthropic_server.respond(anthropic_message(text("ok")))
    async with AnthropicProvider(
        api_key=anthropic_server.api_key, base_url=anthropic_server.base_url
    ) as llm:
        await llm.complete(ask(max_tokens=512, temperature=0.0, purpose="judge"))
        await llm.complete(ask(model="claude-3-haiku-20240307", max_tokens=512, temperature=0.0))
    current, legacy = anthropic_server.bodies()
    assert current["model"] == DEFAULT_ANTHROPIC_MODEL
    assert "temperature" not in current
    assert current["max_tokens"] > 512  # the judge's answer is not eaten by thinking
    assert legacy["temperature"] == 0.0 and legacy["max_tokens"] == 512


async def test_openai_reasoning_models_get_their_own_parameters(
    openai_server: OpenAIServer,
) -> None:
    for _ in range(4):
        openai_server.respond(openai_completion("ok"))
    async with OpenAIProvider(
        api_key=openai_server.api_key,
        base_url=openai_server.base_url,
        max_tokens_field="max_tokens",
    ) as llm:
        await llm.complete(ask(max_tokens=256, temperature=0.0, purpose="route"))
        await llm.complete(ask(model="o4-mini", max_tokens=256, purpose="turn"))
        await llm.complete(ask(model="gpt-4.1", max_tokens=256, temperature=0.0, purpose="judge"))
        await llm.complete(ask(model="gpt-5.2-chat-latest", temperature=0.5))
    router, turn, chat, chat_variant = openai_server.bodies()
    assert router["model"] == DEFAULT_OPENAI_MODEL
    assert "temperature" not in router and "max_tokens" not in router
    assert router["max_completion_tokens"] > 256
    assert router["reasoning_effort"] == "low"
    assert "reasoning_effort" not in turn and turn["max_completion_tokens"] > 256
    assert chat["temperature"] == 0.0 and chat["max_tokens"] == 256
    assert "reasoning_effort" not in chat
    assert chat_variant["temperature"] == 0.5


def test_runtime_code_never_imports_the_sdks() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "runtime"
    pattern = re.compile(r"^\s*(import|from)\s+(openai|anthropic)\b", re.MULTILINE)
    offenders = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
