"""A fork's report counts its own turns, as its tokens (not the turns copied from its
source); and an API key of spaces only is refused where the key is read, as a missing one
is, not sent to the API for an opaque 401."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import AnthropicProvider, OpenAIProvider, ProviderError, Runtime, ScriptedProvider
from runtime.events import EdgeTaken
from runtime.reads import RunReader, Tokens

from .test_llm_node import edge, graph, llm
from .test_tokens_report import turn

pytestmark = pytest.mark.anyio


async def test_a_forks_turns_are_its_own_as_its_tokens_are(tmp_path: Path) -> None:
    two = graph([llm("a", output_keys=["a"]), llm("b", output_keys=["b"])], [edge("a", "b")])
    script = [*turn("a", 100), *turn("b", 20)]
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider(script)) as rt:
        source = await (await rt.start(two)).result()
        events = await rt.read_events(source.run_id)
    [after_a] = [e.seq for e in events if isinstance(e.body, EdgeTaken)]
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider(turn("b", 3))) as rt:
        fork = await rt.fork(source.run_id, after_a)
        assert (await fork.result()).status == "completed"
        assert rt.store is not None
        reader = RunReader(rt.store)
        source_report = await reader.report(source.run_id)
        fork_report = await reader.report(fork.run_id)
    assert source_report.turns == 4
    # Its own node b's two turns; before, a's two copied turns were counted too (4).
    assert (fork_report.turns, fork_report.tokens) == (2, Tokens(input=6, output=2))


@pytest.mark.parametrize("provider", [OpenAIProvider, AnthropicProvider])
@pytest.mark.parametrize("blank", ["", " ", "  \t\n"])
def test_a_blank_api_key_is_refused_as_a_missing_one(
    provider: type[OpenAIProvider] | type[AnthropicProvider],
    blank: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = "OPENAI" if provider is OpenAIProvider else "ANTHROPIC"
    missing = f"no API key: pass api_key=... or set the {env}_API_KEY environment variable"
    monkeypatch.delenv(f"{env}_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="no API key") as none:
        provider()
    assert none.value.reason == missing
    with pytest.raises(ProviderError) as given:
        provider(api_key=blank)
    assert given.value.reason == missing
    monkeypatch.setenv(f"{env}_API_KEY", blank)
    with pytest.raises(ProviderError) as from_env:
        provider()
    assert from_env.value.reason == missing
    monkeypatch.setenv(f"{env}_API_KEY", "sk-test")
    assert provider().settings.api_key == "sk-test"
