"""Stop reasons are facts: read from each provider's answer, recorded on every turn; a
refusal fails the node at once, a turn cut at the token cap is not an answer and its tool
calls never run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import Runtime, tool
from runtime.events import LlmTurn, NodeFailed, ToolResult
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest, LlmResponse, ToolCall, Usage
from runtime.providers._openai import OpenAIProvider
from runtime.providers._scripted import ScriptedProvider, reply

from .llm_servers import (
    AnthropicServer,
    OpenAIServer,
    anthropic_message,
    openai_completion,
    text,
    tool_use,
)
from .test_llm_node import call, graph, llm, of, run_graph, set_output

pytestmark = pytest.mark.anyio


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")])


def cut(text: str = "", *calls: ToolCall, tokens: int = 4096) -> LlmResponse:
    return LlmResponse(
        text=text, tool_calls=list(calls), usage=Usage(output_tokens=tokens), stop="max_tokens"
    )


async def test_a_refusal_fails_the_node_at_once_with_the_refusal(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], max_iterations=50)
    no = LlmResponse(text="I can't help with that.", stop="refusal", stop_reason="refusal")
    provider = ScriptedProvider([no] * 50)
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "failed"
    assert provider.calls == 1  # not asked again up to max_iterations
    [failed] = of(events, NodeFailed)
    assert failed.error_type == "Refused"
    assert "I can't help with that." in failed.error
    [turn] = of(events, LlmTurn)
    assert turn.stop == "refusal"


async def test_every_turn_records_why_the_model_stopped(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"])
    provider = ScriptedProvider([reply("", set_output("a", 1)), reply("done")])
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "completed"
    assert [t.stop for t in of(events, LlmTurn)] == ["tool_use", "end"]


def test_a_turn_logged_before_stops_were_recorded_still_decodes() -> None:
    old = b'{"node_id":"n","iteration":1,"text":"hi","tool_calls":[]}'
    assert msgspec.json.decode(old, type=LlmTurn).stop is None


async def test_a_cut_turn_is_asked_again_with_a_larger_cap_and_its_calls_never_run(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    @tool
    def search(query: str) -> str:
        """Search."""
        ran.append(query)
        return "found"

    node = llm("n", tools=["search"], output_keys=["a"])
    answer = reply("", set_output("a", 1))
    provider = ScriptedProvider([cut("", call("search", query="half")), answer, reply("ok")])
    result, events = await run_graph(tmp_path, graph([node]), provider, tools=[search])
    assert result.status == "completed" and result.memory == {"a": 1}
    assert ran == []  # the call cut at the cap never ran
    assert "search" not in [r.name for r in of(events, ToolResult)]
    first, again = provider.requests[:2]
    assert first.max_tokens is None and again.max_tokens is not None and again.max_tokens >= 8192
    assert [t.stop for t in of(events, LlmTurn)] == ["tool_use", "end"]
    # The cut answer's tokens were paid for too: the turn counts both calls'.
    assert of(events, LlmTurn)[0].output_tokens == 4096 + answer.usage.output_tokens


async def test_a_turn_cut_twice_fails_the_node_as_truncated(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"])
    provider = ScriptedProvider([cut("The answer is", tokens=4096), cut("The answer", tokens=8192)])
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "failed"
    [failed] = of(events, NodeFailed)
    assert failed.error_type == "TruncatedError"
    assert failed.error == "scripted: truncated at 8192 tokens"
    # A cut answer is no answer, but it was paid for: recorded as a cut turn with the
    # tokens of both calls, and no tool calls.
    [turn] = of(events, LlmTurn)
    assert (turn.stop, turn.output_tokens, turn.tool_calls) == ("max_tokens", 4096 + 8192, [])


async def test_openai_stop_reasons(openai_server: OpenAIServer) -> None:
    broken = [("call_1", "search", '{"query": "unfinish')]
    openai_server.respond(openai_completion("", tool_calls=broken, finish_reason="length"))
    refusal = openai_completion(None)
    refusal["choices"][0]["message"]["refusal"] = "I won't do that."
    openai_server.respond(refusal)
    openai_server.respond(openai_completion("fine"))
    async with OpenAIProvider(
        api_key=openai_server.api_key, base_url=openai_server.base_url
    ) as llm:
        truncated = await llm.complete(ask())  # unreadable arguments: never decoded
        refused = await llm.complete(ask())
        plain = await llm.complete(ask())
    assert (truncated.stop, truncated.tool_calls, truncated.stop_reason) == (
        "max_tokens",
        [],
        "length",
    )
    assert (refused.stop, refused.text) == ("refusal", "I won't do that.")
    assert plain.stop == "end"


async def test_anthropic_stop_reasons(anthropic_server: AnthropicServer) -> None:
    partial = tool_use("toolu_1", "search", {"query": "unfin"})
    anthropic_server.respond(anthropic_message(partial, stop_reason="max_tokens"))
    anthropic_server.respond(anthropic_message(text("I can't."), stop_reason="refusal"))
    anthropic_server.respond(anthropic_message(text("paused"), stop_reason="pause_turn"))
    async with AnthropicProvider(
        api_key=anthropic_server.api_key, base_url=anthropic_server.base_url
    ) as llm:
        answers: list[Any] = [await llm.complete(ask()) for _ in range(3)]
    truncated, refused, other = answers
    assert (truncated.stop, truncated.tool_calls) == ("max_tokens", [])
    assert (refused.stop, refused.text) == ("refusal", "I can't.")
    assert (other.stop, other.stop_reason) == ("other", "pause_turn")


async def test_a_refusal_recorded_before_a_crash_fails_the_node_without_asking_again(
    tmp_path: Path,
) -> None:
    node = llm("n", output_keys=["a"])
    no = LlmResponse(text="I can't help with that.", stop="refusal", stop_reason="refusal")
    first, events = await run_graph(tmp_path, graph([node]), ScriptedProvider([no]))
    seq = 1 + [type(e) for e in events].index(LlmTurn)  # seqs count from 1
    # A fork at the refused turn resumes the node as a restart after a crash there would.
    again = ScriptedProvider([reply("", set_output("a", 1)), reply("done")])
    async with Runtime(tmp_path / "run.db", provider=again) as rt:
        fork = await rt.fork(first.run_id, seq)
        result = await fork.result()
        forked = [e.body for e in await rt.read_events(fork.run_id)]
    assert result.status == "failed" and again.calls == 0
    [failed] = of(forked, NodeFailed)
    assert (failed.error_type, failed.error) == (
        "Refused",
        "the model refused: I can't help with that.",
    )
