"""Tool arguments a model sends that are no JSON object (invalid or cut-short JSON, another
JSON value): the provider keeps the text with the call, the LLM node answers the call with
a tool error the model reads and never runs it, the log holds the turn, the text and the
error, and a replay of the run is equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import GraphSpec, NodeSpec, OpenAIProvider, Runtime, ScriptedProvider, tool
from runtime.events import LlmTurn, ToolResult
from runtime.events._timeline import describe_event
from runtime.llm._stall import signature
from runtime.llm._tool_calls import refusal
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest, ToolCall
from runtime.testing import assert_replays, reply

from .llm_servers import AnthropicServer, OpenAIServer, anthropic_message, openai_completion
from .llm_servers import tool_use as anthropic_tool_use

pytestmark = pytest.mark.anyio

CUT = '{"city": "Par'


def _ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Weather in Paris?")])


def _graph(*tools: str) -> GraphSpec:
    node = NodeSpec(id="a", kind="llm", tools=list(tools))
    return GraphSpec(id="g", nodes=[node], edges=[], entry_node="a")


async def _bodies(rt: Runtime, run_id: str) -> list[Any]:
    return [event.body for event in await rt.read_events(run_id)]


async def test_the_openai_provider_keeps_the_text_of_arguments_that_are_no_object(
    openai_server: OpenAIServer,
) -> None:
    # The answer was a MalformedResponseError: the turn, its calls and its billed tokens
    # were lost, and the model never heard what was wrong.
    openai_server.respond(
        openai_completion(
            None,
            tool_calls=[
                ("c1", "get_weather", CUT),
                ("c2", "get_weather", "[1, 2]"),
                ("c3", "get_weather", '{"city": "Lisbon"}'),
            ],
            prompt_tokens=40,
            completion_tokens=9,
        )
    )
    provider = OpenAIProvider(api_key=openai_server.api_key, base_url=openai_server.base_url)
    async with provider as llm:
        answer = await llm.complete(_ask())
        stats = llm.statistics()
    assert answer.tool_calls == [
        ToolCall(id="c1", name="get_weather", arguments={}, raw_arguments=CUT),
        ToolCall(id="c2", name="get_weather", arguments={}, raw_arguments="[1, 2]"),
        ToolCall(id="c3", name="get_weather", arguments={"city": "Lisbon"}),
    ]
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (40, 9)
    assert (stats.calls, stats.failures, stats.input_tokens) == (1, 0, 40)


async def test_arguments_nested_too_deep_to_read_are_kept_as_text(
    openai_server: OpenAIServer,
) -> None:
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    openai_server.respond(openai_completion(None, tool_calls=[("c1", "deep", deep)]))
    provider = OpenAIProvider(api_key=openai_server.api_key, base_url=openai_server.base_url)
    async with provider as llm:
        answer = await llm.complete(_ask())
    assert answer.tool_calls == [ToolCall(id="c1", name="deep", arguments={}, raw_arguments=deep)]
    error = refusal(answer.tool_calls[0])
    assert error is not None
    assert "the arguments are not valid JSON (nested too deep to read)" in error


async def test_the_anthropic_provider_reads_an_input_that_is_no_object_the_same_way(
    anthropic_server: AnthropicServer,
) -> None:
    # The API sends an object; a compatible server's text or list was a malformed answer.
    anthropic_server.respond(
        anthropic_message(
            anthropic_tool_use("t1", "search", '{"query": "x'),
            anthropic_tool_use("t2", "search", ["not", "an", "object"]),
            anthropic_tool_use("t3", "search", '{"query": "y"}'),
            anthropic_tool_use("t4", "search", {"query": "z"}),
        )
    )
    provider = AnthropicProvider(
        api_key=anthropic_server.api_key, base_url=anthropic_server.base_url
    )
    async with provider as llm:
        answer = await llm.complete(_ask())
    assert answer.tool_calls == [
        ToolCall(id="t1", name="search", arguments={}, raw_arguments='{"query": "x'),
        ToolCall(id="t2", name="search", arguments={}, raw_arguments='["not", "an", "object"]'),
        ToolCall(id="t3", name="search", arguments={"query": "y"}),
        ToolCall(id="t4", name="search", arguments={"query": "z"}),
    ]


async def test_an_llm_node_answers_invalid_json_arguments_and_its_run_replays_equal(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    # The node failed with MalformedResponseError on the first answer, and the log held
    # neither that turn nor its tokens.
    cities: list[str] = []

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return f"sunny in {city}"

    openai_server.respond(
        openai_completion(
            None, tool_calls=[("c1", "weather", CUT)], prompt_tokens=30, completion_tokens=4
        )
    )
    openai_server.respond(
        openai_completion(
            None,
            tool_calls=[("c2", "weather", '{"city": "Paris"}')],
            prompt_tokens=70,
            completion_tokens=6,
        )
    )
    openai_server.respond(openai_completion("Sunny.", prompt_tokens=90, completion_tokens=2))
    model = OpenAIProvider(api_key=openai_server.api_key, base_url=openai_server.base_url)
    async with model, Runtime(tmp_path / "r.db", provider=model, tools=[weather]) as rt:
        handle = await rt.start(_graph("weather"))
        result = await handle.result()
        bodies = await _bodies(rt, handle.run_id)
        report = await rt.replay(handle.run_id)
    assert result.status == "completed", result.error
    assert cities == ["Paris"]  # the unreadable call never ran
    assert report.equal, report.summary()

    turns = [body for body in bodies if isinstance(body, LlmTurn)]
    assert [turn.tool_calls for turn in turns] == [
        [ToolCall(id="c1", name="weather", arguments={}, raw_arguments=CUT)],
        [ToolCall(id="c2", name="weather", arguments={"city": "Paris"})],
        [],
    ]
    assert [(t.input_tokens, t.output_tokens) for t in turns] == [(30, 4), (70, 6), (90, 2)]
    results = [body for body in bodies if isinstance(body, ToolResult)]
    assert [(r.call_id, r.is_error) for r in results] == [("c1", True), ("c2", False)]
    error = results[0].content
    assert error.startswith(
        "ToolArgumentsError: invalid arguments for tool 'weather': the arguments are not "
        "valid JSON (Unterminated string starting at: line 1 column 10 (char 9))"
    )
    assert error.endswith(f"The arguments were: {CUT}")
    # The turn and its error are one commit: the error follows its turn at once.
    first = bodies.index(turns[0])
    assert bodies[first + 1] == results[0]
    # The timeline shows the text the model sent, not an empty call.
    async with Runtime(tmp_path / "r.db") as rt:
        events = await rt.read_events(handle.run_id)
    turn_event = next(event for event in events if event.body == turns[0])
    assert describe_event(turn_event)[2] == f"calls weather(unreadable: {CUT!r})"

    # The model read the error as the call's result; its call was sent back as "{}",
    # which every compatible server reads (invalid JSON there is refused by some).
    second = openai_server.requests[1].body["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert second[-1] == {"role": "tool", "tool_call_id": "c1", "content": error}


async def test_a_replay_serves_a_later_readable_call_its_own_result(tmp_path: Path) -> None:
    # The unreadable call's error sat first in the recorded results of ping({}), so a
    # replay served it to the readable ping() that followed, and diverged.
    pings: list[int] = []

    @tool
    def ping() -> str:
        """Ping."""
        pings.append(1)
        return "pong"

    model = ScriptedProvider(
        [
            reply("", ToolCall(id="p1", name="ping", arguments={}, raw_arguments="{,}")),
            reply("", ToolCall(id="p2", name="ping", arguments={})),
            reply("", ToolCall(id="p3", name="ping", arguments={}, raw_arguments='"now"')),
            reply("done"),
        ]
    )
    async with Runtime(tmp_path / "r.db", provider=model, tools=[ping]) as rt:
        handle = await rt.start(_graph("ping"))
        assert (await handle.result()).status == "completed"
        bodies = await _bodies(rt, handle.run_id)
        await assert_replays(rt, handle.run_id)
    assert pings == [1]
    results = [(b.call_id, b.content, b.is_error) for b in bodies if isinstance(b, ToolResult)]
    assert results[1] == ("p2", "pong", False)
    assert results[0][2] and "are not valid JSON (Expecting property name" in results[0][1]
    assert results[2][2] and "are a JSON string, not an object" in results[2][1]


async def test_a_long_unreadable_text_is_kept_whole_and_quoted_in_part(tmp_path: Path) -> None:
    @tool
    def write(text: str) -> str:
        """Write text."""
        return "written"

    raw = '{"text": "' + "x" * 5000  # cut short at the cap of a compatible server
    model = ScriptedProvider(
        [reply("", ToolCall(id="w1", name="write", arguments={}, raw_arguments=raw)), "done"]
    )
    async with Runtime(tmp_path / "r.db", provider=model, tools=[write]) as rt:
        handle = await rt.start(_graph("write"))
        assert (await handle.result()).status == "completed"
        bodies = await _bodies(rt, handle.run_id)
    turn = next(b for b in bodies if isinstance(b, LlmTurn))
    assert turn.tool_calls[0].raw_arguments == raw
    error = next(b for b in bodies if isinstance(b, ToolResult)).content
    assert error.endswith(f"{raw[:1000]}... (5010 chars)")


def test_unreadable_calls_are_the_same_for_stall_detection_only_when_their_text_is() -> None:
    # Each read as {}: a model correcting different bad texts looked like one repeating
    # the same call.
    first = ToolCall(id="a", name="f", arguments={}, raw_arguments='{"x": 1')
    other = ToolCall(id="b", name="f", arguments={}, raw_arguments='{"x": 2')
    empty = ToolCall(id="c", name="f", arguments={})
    assert signature([first]) != signature([other])
    assert signature([first]) != signature([empty])
    assert signature([first]) == signature([msgspec.structs.replace(first, id="z")])
