"""The scripted provider, and parse_json_object (the JSON extraction judges and edges use)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._errors import MalformedResponseError, ProviderError, ProviderHTTPError
from runtime.engine._edges import decide_edge
from runtime.providers._base import (
    ChatMessage,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ToolCall,
    parse_json_object,
)
from runtime.providers._scripted import ScriptedProvider, reply, tool_call
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = pytest.mark.anyio


def ask(content: str = "go", purpose: str = "turn") -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content=content)], purpose=purpose)


async def test_entries_are_answered_in_order() -> None:
    call = tool_call("search", query="lisbon", limit=3)
    llm = ScriptedProvider(["first", reply("", call), LlmResponse(text="third", model="m")])
    assert isinstance(llm, LlmProvider)
    assert (await llm.complete(ask())).text == "first"
    second = await llm.complete(ask())
    assert second.tool_calls == [call]
    assert call.arguments == {"query": "lisbon", "limit": 3}
    assert second.stop_reason == "tool_use"
    third = await llm.complete(ask())
    assert (third.text, third.model) == ("third", "m")
    assert llm.calls == 3
    assert llm.remaining() == 0


async def test_running_past_the_end_is_a_clear_provider_error() -> None:
    llm = ScriptedProvider(["only"])
    await llm.complete(ask())
    with pytest.raises(ProviderError, match="script exhausted after 1 calls"):
        await llm.complete(ask("what now?"))
    assert llm.calls == 2


async def test_callable_entries_receive_the_request() -> None:
    def echo(request: LlmRequest) -> str:
        return request.messages[-1].content.upper()

    llm = ScriptedProvider([echo, lambda r: reply(f"{len(r.messages)} messages")])
    assert (await llm.complete(ask("shout"))).text == "SHOUT"
    assert (await llm.complete(ask())).text == "1 messages"


async def test_a_callable_script_is_never_exhausted() -> None:
    llm = ScriptedProvider(lambda r: f"call for {r.purpose}")
    for _ in range(5):
        assert (await llm.complete(ask())).text == "call for turn"
    assert llm.remaining() is None


async def test_scripted_provider_errors_are_raised() -> None:
    failure = ProviderHTTPError("scripted", "rate limited", status=429, retryable=True)
    llm = ScriptedProvider([failure, "after failure"])
    with pytest.raises(ProviderHTTPError) as caught:
        await llm.complete(ask())
    assert caught.value is failure
    assert (await llm.complete(ask())).text == "after failure"


async def test_non_provider_exceptions_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="ProviderError"):
        ScriptedProvider([ValueError("nope")])  # type: ignore[list-item]


async def test_a_callable_that_raises_becomes_a_provider_error() -> None:
    def broken(request: LlmRequest) -> str:
        raise KeyError("missing")

    llm = ScriptedProvider([broken])
    with pytest.raises(ProviderError, match="KeyError") as caught:
        await llm.complete(ask())
    assert isinstance(caught.value.__cause__, KeyError)


async def test_judge_and_router_calls_use_their_own_scripts() -> None:
    llm = ScriptedProvider(
        ["turn 1", "turn 2"],
        judge=['{"verdict": "RETRY"}', '{"verdict": "ACCEPT"}'],
        router=['{"target": "b"}'],
    )
    assert (await llm.complete(ask())).text == "turn 1"
    assert (await llm.complete(ask(purpose="judge"))).text == '{"verdict": "RETRY"}'
    assert (await llm.complete(ask(purpose="route"))).text == '{"target": "b"}'
    assert (await llm.complete(ask())).text == "turn 2"
    assert (await llm.complete(ask(purpose="judge"))).text == '{"verdict": "ACCEPT"}'
    assert (llm.calls_for("turn"), llm.calls_for("judge"), llm.calls_for("route")) == (2, 2, 1)
    assert [r.purpose for r in llm.requests] == ["turn", "judge", "route", "turn", "judge"]
    assert len(llm.requests_for("judge")) == 2
    with pytest.raises(ProviderError, match="judge script exhausted after 2 calls"):
        await llm.complete(ask(purpose="judge"))
    assert llm.remaining("router") == 0


async def test_without_a_judge_script_judge_calls_share_the_main_script() -> None:
    llm = ScriptedProvider(["worker", "judge says ok"])
    await llm.complete(ask())
    assert (await llm.complete(ask(purpose="judge"))).text == "judge says ok"


async def test_tool_call_ids_are_unique() -> None:
    ids = {tool_call("t").id for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("call_") for i in ids)


async def test_responses_survive_a_msgspec_round_trip() -> None:
    # Turns go to the event log: the response types must encode and decode unchanged.
    response = reply("text", tool_call("calc", a=1, b=[1, 2]))
    decoded = msgspec.json.decode(msgspec.json.encode(response), type=LlmResponse)
    assert decoded == response


# -- parse_json_object


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        (
            '```json\n{"verdict": "ACCEPT", "confidence": 0.9}\n```',
            {"verdict": "ACCEPT", "confidence": 0.9},
        ),
        ('Sure! Here it is:\n```\n{"target": "b"}\n```\nHope that helps.', {"target": "b"}),
        ('The answer is {"x": {"y": [1, 2]}} and more text {"z": 1}', {"x": {"y": [1, 2]}}),
        ('not {valid} but then {"ok": true}', {"ok": True}),
        ('```json\n[1, 2]\n```\n{"after": "fence"}', {"after": "fence"}),
    ],
)
async def test_parse_json_object_finds_the_first_object(raw: str, expected: dict[str, Any]) -> None:
    assert parse_json_object(raw) == expected


DEEP = '{"a":' * 5000 + "1" + "}" * 5000


@pytest.mark.parametrize(
    "raw", ["", "no json here", "[1, 2, 3]", '{"unterminated": ', "{{{{", DEEP]
)
async def test_parse_json_object_raises_malformed_when_none(raw: str) -> None:
    with pytest.raises(MalformedResponseError):
        parse_json_object(raw)


async def test_a_router_answer_nested_too_deep_takes_the_fallback_edge() -> None:
    graph = GraphSpec(
        id="g",
        nodes=[NodeSpec(id=i, kind="router") for i in ("a", "b", "c")],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="c"),
            EdgeSpec(source="a", target="c", condition="llm_decide"),
        ],
        entry_node="a",
    )
    route = await decide_edge(graph, "a", {}, ScriptedProvider([], router=[DEEP]))
    assert route.target == "c" and route.reason.startswith("fallback")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    prose=st.text(alphabet=st.characters(blacklist_characters="{}`"), max_size=30),
    trailer=st.text(max_size=30),
    fenced=st.booleans(),
)
def test_parse_json_object_recovers_any_embedded_object(
    obj: dict[str, Any], prose: str, trailer: str, fenced: bool
) -> None:
    body = json.dumps(obj)
    text = f"{prose}\n```json\n{body}\n```\n{trailer}" if fenced else f"{prose} {body} {trailer}"
    assert parse_json_object(text) == obj


# --- the wire rules the real chat APIs enforce ------------------------------------------


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def calls(*ids: str) -> ChatMessage:
    return ChatMessage(
        role="assistant", tool_calls=[ToolCall(id=i, name="f", arguments={}) for i in ids]
    )


def result(id: str) -> ChatMessage:
    return ChatMessage(role="tool", content="r", tool_call_id=id)


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        (
            [user("go"), calls("a", "b"), result("a"), user("next"), result("b")],
            "OpenAI would refuse it: messages.[3]: an assistant message with 'tool_calls' must",
        ),
        (
            [user("go"), calls("a"), calls("b"), result("a"), result("b")],
            "must be followed by tool messages answering each id; missing ['a']",
        ),
        ([user("go"), result("a")], "'tool' must respond to a preceding 'tool_calls'"),
        (
            [user("go"), calls("a"), result("a"), result("a")],
            "'tool' must respond to a preceding 'tool_calls'",
        ),
        ([user("go"), calls("a")], "did not have response messages: ['a']"),
        # Only Anthropic requires a conversation to open with the user.
        (
            [ChatMessage(role="assistant", content="hi"), user("go")],
            "Anthropic would refuse it: messages.0: roles must alternate from 'user'",
        ),
        ([ChatMessage(role="system", content="rules")], "no user or assistant"),
        ([user("go"), calls("a", "a"), result("a"), result("a")], "two tool calls with one id"),
        # Rules of the encoded request, not of the shared message list:
        (
            [user("go"), ChatMessage(role="assistant", content="Sure:")],
            "Anthropic would refuse it: the conversation ends with an assistant message",
        ),
        ([user("go"), calls("call~2"), result("call~2")], "tool_use id 'call~2' is not"),
    ],
)
async def test_a_request_the_real_apis_refuse_fails_loudly(
    messages: list[ChatMessage], rule: str
) -> None:
    llm = ScriptedProvider(["never"])
    with pytest.raises(ProviderHTTPError) as caught:
        await llm.complete(LlmRequest(messages=messages))
    assert caught.value.status == 400 and rule in caught.value.reason
    assert llm.remaining() == 1  # the script was not consumed


async def test_a_well_formed_conversation_passes_and_the_check_can_be_turned_off() -> None:
    good = [
        ChatMessage(role="system", content="rules"),
        user("go"),
        calls("a", "b"),
        result("b"),
        result("a"),
        ChatMessage(role="assistant", content="done"),
        user("more"),
    ]
    assert (await ScriptedProvider(["ok"]).complete(LlmRequest(messages=good))).text == "ok"
    bad = LlmRequest(messages=[user("go"), calls("a")])
    assert (await ScriptedProvider(["ok"], check_wire=False).complete(bad)).text == "ok"
