from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.events._conversation import ConversationEntry
from runtime.llm._prompt import (
    SUMMARY_PREFIX,
    build_system_prompt,
    estimate_tokens,
    plan_compaction,
    summary_message,
    to_chat_messages,
    transition_marker,
)
from runtime.providers._base import ChatMessage, ToolCall

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Goal:
    description: str
    success_criteria: list[Any] = field(default_factory=list)
    constraints: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Criterion:
    description: str


def Entry(role: str, content: str, **kw: Any) -> ConversationEntry:
    kw.setdefault("node_id", "n1")
    kw.setdefault("kind", "message")
    return ConversationEntry(role=role, content=content, **kw)


GOAL = Goal(
    description="Plan a trip to Lisbon",
    success_criteria=["Itemised budget", Criterion("Specific flight numbers")],
    constraints=["Stay under $2000"],
)


async def test_system_prompt_layers_in_onion_order() -> None:
    prompt = build_system_prompt(
        identity="You are a careful travel agent.",
        narrative="The client travels in May.",
        goal=GOAL,
        focus="Find flights from Berlin.",
        node_description="Flight search",
        output_keys=["flight_options", "notes"],
        nullable_keys=["notes"],
    )
    assert prompt == (
        "## Identity\nYou are a careful travel agent.\n\n"
        "## Goal\nGoal: Plan a trip to Lisbon\n\n"
        "Success criteria for the whole job:\n- Itemised budget\n- Specific flight numbers\n\n"
        "Constraints (never violate these):\n- Stay under $2000\n\n"
        "The client travels in May.\n\n"
        "## Current task\nFlight search\n\nFind flights from Berlin.\n\n"
        "Required outputs: when the work is done, call set_output(key, value) for each of: "
        "flight_options.\n\n"
        "Optional outputs: call set_output(key, value) for any of these that apply: notes."
    )


async def test_system_prompt_outer_layers_are_identical_across_nodes() -> None:
    a = build_system_prompt(
        identity="I am X.",
        narrative="ctx",
        goal=GOAL,
        focus="Do A.",
        node_description="A",
        output_keys=["a"],
    )
    b = build_system_prompt(
        identity="I am X.",
        narrative="ctx",
        goal=GOAL,
        focus="Do B.",
        node_description="B",
        output_keys=[],
    )
    prefix = a.split("## Current task")[0]
    assert b.startswith(prefix)
    assert "set_output" not in b
    assert a.index("## Identity") < a.index("## Goal") < a.index("## Current task")


async def test_system_prompt_omits_empty_layers() -> None:
    prompt = build_system_prompt(
        identity="  ",
        narrative="",
        goal=None,
        focus="Only focus.",
        node_description="",
        output_keys=["x"],
    )
    assert prompt == (
        "## Current task\nOnly focus.\n\n"
        "Required outputs: when the work is done, call set_output(key, value) for each of: x."
    )


async def test_transition_marker_states_outputs_and_next_phase() -> None:
    text = transition_marker(
        from_node="search",
        outputs={"flights": "TP 1234\nLH 99", "count": 2, "long": "x" * 500},
        to_node="book",
        to_description="Book the cheapest flight",
    )
    lines = text.splitlines()
    assert lines[0] == '[Phase transition] Phase "search" is complete.'
    assert lines[1] == "Outputs it produced:"
    assert lines[2] == "- flights: TP 1234 LH 99"
    assert lines[3] == "- count: 2"
    assert lines[4].startswith("- long: xxx") and lines[4].endswith("...")
    assert len(lines[4]) == len("- long: ") + 200
    assert lines[5] == 'Next phase: "book" - Book the cheapest flight.'
    assert "reflect" in lines[6]
    assert text == transition_marker(
        from_node="search",
        outputs={"flights": "TP 1234\nLH 99", "count": 2, "long": "x" * 500},
        to_node="book",
        to_description="Book the cheapest flight",
    )


async def test_transition_marker_without_outputs() -> None:
    text = transition_marker(from_node="a", outputs={}, to_node="b", to_description="")
    assert "It produced no outputs." in text
    assert 'Next phase: "b".' in text


async def test_estimate_tokens_is_chars_over_four_plus_overhead() -> None:
    assert estimate_tokens([]) == 0
    assert estimate_tokens([ChatMessage(role="user", content="abcd")]) == 1 + 4
    assert estimate_tokens([ChatMessage(role="user", content="abcde")]) == 2 + 4
    call = ToolCall(id="1", name="ab", arguments={"q": 1})  # '{"q":1}' is 7 chars
    msg = ChatMessage(role="assistant", content="", tool_calls=[call])
    assert estimate_tokens([msg]) == 3 + 4


def _convo(n: int, size: int = 100) -> list[ChatMessage]:
    return [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i} " + "y" * size)
        for i in range(n)
    ]


async def test_plan_compaction_none_within_budget() -> None:
    msgs = _convo(10)
    assert plan_compaction(msgs, budget_tokens=estimate_tokens(msgs)) is None


async def test_plan_compaction_keeps_last_messages_and_summarises_the_rest() -> None:
    msgs = _convo(10, size=20)
    plan = plan_compaction(msgs, budget_tokens=10, keep_last=4)
    assert plan is not None
    upto, summary = plan
    assert upto == 6
    lines = summary.splitlines()
    assert lines == [f"{m.role}: {m.content}" for m in msgs[:6]]


async def test_plan_compaction_never_splits_tool_calls_from_results() -> None:
    call = ToolCall(id="c1", name="search", arguments={"q": "lisbon"})
    msgs = [
        ChatMessage(role="user", content="find flights " * 20),
        ChatMessage(role="assistant", content="looking", tool_calls=[call]),
        ChatMessage(role="tool", content="TP 1234", tool_call_id="c1", name="search"),
        ChatMessage(role="tool", content="LH 99", tool_call_id="c2", name="search"),
        ChatMessage(role="assistant", content="done"),
    ]
    # keep_last=3 would start the kept part at a tool result: move back to the call.
    plan = plan_compaction(msgs, budget_tokens=5, keep_last=3)
    assert plan is not None
    upto, summary = plan
    assert upto == 1
    assert msgs[upto].role == "assistant"
    plan = plan_compaction(msgs, budget_tokens=5, keep_last=1)
    assert plan is not None
    upto, summary = plan
    assert upto == 4
    assert summary.splitlines()[1:] == [
        "assistant: looking",
        'assistant called search({"q":"lisbon"})',
        "tool search: TP 1234",
        "tool search: LH 99",
    ]


async def test_plan_compaction_none_when_nothing_can_be_replaced() -> None:
    call = ToolCall(id="c1", name="t", arguments={})
    msgs = [
        ChatMessage(role="assistant", content="x" * 400, tool_calls=[call]),
        ChatMessage(role="tool", content="y" * 400, tool_call_id="c1"),
    ]
    assert plan_compaction(msgs, budget_tokens=1, keep_last=1) is None
    assert plan_compaction(_convo(3), budget_tokens=1, keep_last=6) is None


async def test_plan_compaction_caps_summary_and_carries_earlier_summary() -> None:
    earlier = summary_message("user: the original task\nassistant: first answer")
    msgs = [earlier, *_convo(30, size=300)]
    plan = plan_compaction(msgs, budget_tokens=10, keep_last=2)
    assert plan is not None
    upto, summary = plan
    assert upto == 29
    assert len(summary) <= 4000 + 40
    assert summary.startswith("(") and "earlier lines omitted)" in summary.splitlines()[0]
    assert summary.splitlines()[-1].startswith("assistant: m27 ")
    small = plan_compaction([earlier, *_convo(4, 400)], budget_tokens=10, keep_last=2)
    assert small is not None
    assert small[1].splitlines()[:2] == ["user: the original task", "assistant: first answer"]


async def test_plan_compaction_is_deterministic_and_shrinks() -> None:
    msgs = _convo(40, size=200)
    a = plan_compaction(msgs, budget_tokens=500)
    assert a is not None
    assert a == plan_compaction(msgs, budget_tokens=500)
    upto, summary = a
    compacted = [summary_message(summary), *msgs[upto:]]
    assert estimate_tokens(compacted) < estimate_tokens(msgs)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["user", "assistant_call", "assistant", "tool"]), max_size=30),
    st.integers(min_value=0, max_value=8),
)
def test_compaction_boundary_is_always_safe(kinds: list[str], keep_last: int) -> None:
    msgs: list[ChatMessage] = []
    for i, kind in enumerate(kinds):
        if kind == "assistant_call":
            call = ToolCall(id=f"c{i}", name="t", arguments={"i": i})
            msgs.append(ChatMessage(role="assistant", content="z" * 50, tool_calls=[call]))
        elif kind == "tool":
            msgs.append(ChatMessage(role="tool", content="z" * 50, tool_call_id=f"c{i}"))
        else:
            msgs.append(ChatMessage(role=kind, content="z" * 50))  # type: ignore[arg-type]
    plan = plan_compaction(msgs, budget_tokens=1, keep_last=keep_last)
    if plan is None:
        return
    upto, _ = plan
    assert 0 < upto <= len(msgs) - keep_last
    assert upto == len(msgs) or msgs[upto].role != "tool"


async def test_to_chat_messages_filters_by_node_and_converts_tool_calls() -> None:
    entries = [
        Entry(role="user", content="hi", node_id="a"),
        Entry(
            role="assistant",
            content="",
            node_id="b",
            tool_calls=[ToolCall(id="c1", name="search", arguments={"q": "x"})],
        ),
        Entry(role="tool", content="result", node_id="b", tool_call_id="c1", name="search"),
        Entry(role="user", content="[Phase transition] ...", node_id="b", kind="transition"),
    ]
    everything = to_chat_messages(entries)
    assert [m.role for m in everything] == ["user", "assistant", "tool", "user"]
    assert everything[1].tool_calls == [ToolCall(id="c1", name="search", arguments={"q": "x"})]
    assert everything[2] == ChatMessage(
        role="tool", content="result", tool_call_id="c1", name="search"
    )
    only_b = to_chat_messages(entries, node_id="b")
    assert [m.content for m in only_b] == ["", "result", "[Phase transition] ..."]


async def test_to_chat_messages_summary_replaces_everything_before_it() -> None:
    entries = [
        Entry(role="user", content="old 1"),
        Entry(role="assistant", content="old 2"),
        Entry(role="user", content="user: old 1\nassistant: old 2", kind="summary"),
        Entry(role="assistant", content="new"),
    ]
    msgs = to_chat_messages(entries)
    assert msgs == [
        ChatMessage(role="user", content=f"{SUMMARY_PREFIX}\nuser: old 1\nassistant: old 2"),
        ChatMessage(role="assistant", content="new"),
    ]
    # A summary of another node does not cut an isolated node's history.
    other = [Entry(role="user", content="mine", node_id="x"), *entries]
    assert [m.content for m in to_chat_messages(other, node_id="x")] == ["mine"]


async def test_summary_message_round_trips_through_to_chat_messages() -> None:
    msg = summary_message("a line")
    entry = Entry(role="user", content=msg.content, kind="summary")
    assert to_chat_messages([entry]) == [msg]
