"""What an LLM node records of a model turn's tool calls: the live run, its log and a run
resumed from that log (a fork at a seq stands in for a crash there) agree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runtime import GraphSpec, NodeSpec, RunStateError, Runtime, ScriptedProvider, tool
from runtime.events import LlmTurn, ToolResult
from runtime.providers._base import ToolCall
from runtime.testing import reply

pytestmark = pytest.mark.anyio


def _graph(*tools: str) -> GraphSpec:
    node = NodeSpec(id="a", kind="llm", tools=list(tools))
    return GraphSpec(id="g", nodes=[node], edges=[], entry_node="a")


async def _events(rt: Runtime, run_id: str) -> list[Any]:
    return [(e.seq, e.body) for e in await rt.read_events(run_id)]


def _turn_calls(events: list[Any]) -> list[list[ToolCall]]:
    return [body.tool_calls for _, body in events if isinstance(body, LlmTurn)]


def _results(events: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (body.call_id, body.content, body.is_error)
        for _, body in events
        if isinstance(body, ToolResult)
    ]


async def test_tool_arguments_the_log_would_change_are_refused_to_the_model(
    tmp_path: Path,
) -> None:
    # NaN in JSON arguments reached the tool live while the log recorded null: the live
    # run and every read of its log disagreed about what the model asked for.
    seen: list[float] = []

    @tool
    def double(x: float, y: int = 0) -> float:
        """Twice x, plus y."""
        seen.append(x)
        return 2 * x + y

    model = ScriptedProvider(
        [
            reply("", ToolCall(id="c1", name="double", arguments={"x": float("nan"), "y": 1})),
            reply("", ToolCall(id="c2", name="double", arguments={"x": 2.0})),
            reply("done"),
        ]
    )
    db = tmp_path / "r.db"
    async with Runtime(db, provider=model, tools=[double]) as rt:
        handle = await rt.start(_graph("double"))
        result = await handle.result()
        events = await _events(rt, handle.run_id)
    assert result.status == "completed"
    assert seen == [2.0]  # the refused call never ran
    assert _results(events) == [
        (
            "c1",
            "ToolArgumentsError: invalid arguments for tool 'double': argument 'x' is nan "
            "(JSON has no NaN or infinity)",
            True,
        ),
        ("c2", "4.0", False),
    ]
    recorded = _turn_calls(events)[0][0]
    assert recorded.arguments == {"x": None, "y": 1}
    # The model was shown the call as the log holds it, so a resume shows it the same.
    live = model.requests[1].messages
    assert [m.tool_calls for m in live if m.role == "assistant"] == [[recorded]]

    # A resume right after the refusal (the turn and its refusal are one commit) asks the
    # model with the same conversation and does not run the refused call.
    refused_at = next(seq for seq, body in events if isinstance(body, ToolResult))
    again = ScriptedProvider(
        [reply("", ToolCall(id="c2", name="double", arguments={"x": 2.0})), reply("done")]
    )
    async with Runtime(db, provider=again, tools=[double]) as rt:
        fork = await rt.fork(handle.run_id, refused_at)
        assert (await fork.result()).status == "completed"
    assert seen == [2.0, 2.0]
    assert again.requests[0].messages == live


@pytest.mark.parametrize(
    "value",
    [float("inf"), [1.0, float("-inf")], {"text": "half a pair \ud800"}],
    ids=["infinity", "nested", "surrogate"],
)
async def test_every_value_the_log_cannot_store_is_refused(tmp_path: Path, value: Any) -> None:
    seen: list[Any] = []

    @tool
    def echo(x: Any) -> str:
        """Echo x."""
        seen.append(x)
        return "ok"

    model = ScriptedProvider(
        [reply("", ToolCall(id="c1", name="echo", arguments={"x": value})), reply("done")]
    )
    async with Runtime(tmp_path / "r.db", provider=model, tools=[echo]) as rt:
        handle = await rt.start(_graph("echo"))
        assert (await handle.result()).status == "completed"
        events = await _events(rt, handle.run_id)
    assert seen == []
    [(call_id, content, is_error)] = _results(events)
    assert (call_id, is_error) == ("c1", True)
    assert content.startswith("ToolArgumentsError: invalid arguments for tool 'echo': argument 'x'")
    assert _turn_calls(events)[0][0].arguments == {"x": None}


async def test_two_calls_with_one_id_are_recorded_with_distinct_ids(tmp_path: Path) -> None:
    # One result answered both calls (results match calls by id): a resume after the
    # first result skipped the second call, and the next request had one id twice.
    notes: list[str] = []

    @tool
    def note(text: str) -> str:
        """Write a note."""
        notes.append(text)
        return f"noted {text}"

    model = ScriptedProvider(
        [
            reply(
                "",
                ToolCall(id="dup", name="note", arguments={"text": "a"}),
                ToolCall(id="dup", name="note", arguments={"text": "b"}),
                ToolCall(id="dup_2", name="note", arguments={"text": "c"}),
            ),
            reply("done"),
        ]
    )
    db = tmp_path / "r.db"
    async with Runtime(db, provider=model, tools=[note]) as rt:
        handle = await rt.start(_graph("note"))
        result = await handle.result()
        events = await _events(rt, handle.run_id)
    assert result.status == "completed"
    assert sorted(notes) == ["a", "b", "c"]
    assert [c.id for c in _turn_calls(events)[0]] == ["dup", "dup_3", "dup_2"]
    # Ids any provider accepts (Anthropic's pattern is the strictest).
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", c.id) for c in _turn_calls(events)[0])
    assert _results(events) == [
        ("dup", "noted a", False),
        ("dup_3", "noted b", False),
        ("dup_2", "noted c", False),
    ]
    live = model.requests[1].messages

    # A crash after the turn, before its results (recorded in one append: a fork among
    # them is refused): the resume runs the three calls, under the same distinct ids.
    first_result = next(seq for seq, body in events if isinstance(body, ToolResult))
    again = ScriptedProvider([reply("done")])
    async with Runtime(db, provider=again, tools=[note]) as rt:
        with pytest.raises(RunStateError, match="in one append"):
            await rt.fork(handle.run_id, first_result)
        fork = await rt.fork(handle.run_id, first_result - 1)
        assert (await fork.result()).status == "completed"
        forked = await _events(rt, fork.run_id)
    assert sorted(notes[3:]) == ["a", "b", "c"]
    assert _results(forked) == _results(events)
    assert again.requests[0].messages == live
