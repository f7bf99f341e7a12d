"""What an LLM node records of a model turn's tool calls: the live run, its log and a run
resumed from that log (a fork at a seq stands in for a crash there) agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import GraphSpec, LlmTurn, NodeSpec, Runtime, ScriptedProvider, ToolResult, tool
from runtime._llm import ToolCall
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
                ToolCall(id="dup~2", name="note", arguments={"text": "c"}),
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
    assert [c.id for c in _turn_calls(events)[0]] == ["dup", "dup~3", "dup~2"]
    assert _results(events) == [
        ("dup", "noted a", False),
        ("dup~3", "noted b", False),
        ("dup~2", "noted c", False),
    ]
    live = model.requests[1].messages

    # A crash after the first result: the resume runs exactly the two unanswered calls.
    first_result = next(seq for seq, body in events if isinstance(body, ToolResult))
    again = ScriptedProvider([reply("done")])
    async with Runtime(db, provider=again, tools=[note]) as rt:
        fork = await rt.fork(handle.run_id, first_result)
        assert (await fork.result()).status == "completed"
        forked = await _events(rt, fork.run_id)
    assert sorted(notes[3:]) == ["b", "c"]
    assert _results(forked) == _results(events)
    assert again.requests[0].messages == live
