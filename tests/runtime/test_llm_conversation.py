"""The conversation an LLM node sends and records: one projection shared with the fold,
parallel branches kept well formed, and at most two commits per turn."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from eventstore import EventBody
from runtime._runtime import Runtime
from runtime.events._catalogue import (
    LlmTurn,
    MessageAdded,
    OutputSet,
    ToolResult,
    Verdict,
)
from runtime.llm._prompt import to_chat_messages
from runtime.llm._tools import tool
from runtime.providers._base import ChatMessage, LlmRequest, LlmResponse
from runtime.providers._scripted import ScriptedProvider, reply

from .test_llm_node import call, edge, fn, graph, llm, set_output

pytestmark = pytest.mark.anyio


def well_formed(messages: Sequence[ChatMessage]) -> None:
    """Every assistant tool call is answered by its results before any other message."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool":
            raise AssertionError(f"tool message without its call at {index - 1}")
        if message.role == "assistant" and message.tool_calls:
            wanted = {c.id for c in message.tool_calls}
            while wanted:
                assert index < len(messages), f"calls {wanted} never answered"
                answer = messages[index]
                assert answer.role == "tool", f"{answer.role} message before results {wanted}"
                wanted.remove(answer.tool_call_id or "")
                index += 1


def by_node(request: LlmRequest) -> str:
    return request.system.rsplit("Focus: ", 1)[1].split("\n", 1)[0]


async def test_parallel_llm_branches_keep_the_conversation_well_formed(tmp_path: Path) -> None:
    arrived: list[str] = []
    both = anyio.Event()

    @tool
    async def meet(who: str) -> str:
        """Wait until the other branch calls too."""
        arrived.append(who)
        if len(arrived) == 2:
            both.set()
        await both.wait()  # both turns are recorded before either result
        return f"{who} met"

    turns: dict[str, int] = {}

    def script(request: LlmRequest) -> LlmResponse:
        node = by_node(request)
        turns[node] = turns.get(node, 0) + 1
        step = turns[node]
        if node == "join":
            return reply("", set_output("summary", "done")) if step == 1 else reply("ok")
        if step == 1:
            return reply(f"{node} starts", call("meet", who=node))
        if step == 2:
            return reply("", set_output(node, f"{node} result"))
        return reply(f"{node} finished")

    g = graph(
        [
            fn("start"),
            llm("a", tools=["meet"], output_keys=["a"], system_prompt="Focus: a"),
            llm("b", tools=["meet"], output_keys=["b"], system_prompt="Focus: b"),
            llm("join", output_keys=["summary"], system_prompt="Focus: join"),
        ],
        [edge("start", "a"), edge("start", "b"), edge("a", "join"), edge("b", "join")],
    )
    provider = ScriptedProvider(script)
    async with Runtime(
        tmp_path / "run.db",
        provider=provider,
        tools=[meet],
        functions={"start": lambda inputs: {"go": True}},
    ) as rt:
        handle = await rt.start(g)
        result = await handle.result()
        state = await rt.get_state(handle.run_id)
        events = [e.body for e in await rt.read_events(handle.run_id)]
    assert result.status == "completed", result.error
    # The log interleaves the branches: both turns come before either result...
    kinds = [(type(b).__name__, b.node_id) for b in events if isinstance(b, LlmTurn | ToolResult)]
    assert kinds[:2] == [("LlmTurn", "a"), ("LlmTurn", "b")] or kinds[:2] == [
        ("LlmTurn", "b"),
        ("LlmTurn", "a"),
    ]
    # ...but every request, and the fold's conversation, keep each call with its results.
    for request in provider.requests:
        well_formed(request.messages)
    well_formed(to_chat_messages(state.conversation.entries))
    join_first = next(r for r in provider.requests if by_node(r) == "join")
    assert (
        join_first.messages
        == to_chat_messages(state.conversation.entries)[: len(join_first.messages)]
    )
    # A branch sees the conversation before the fork and its own turns, not its sibling's.
    for node, other in (("a", "b"), ("b", "a")):
        seen = [m.content for r in provider.requests if by_node(r) == node for m in r.messages]
        assert f"{node} starts" in seen and f"{other} starts" not in seen


async def test_an_llm_turn_commits_at_most_twice(tmp_path: Path) -> None:
    batches: list[list[EventBody]] = []

    def count(run_id: str, seq: int, bodies: Sequence[EventBody]) -> None:
        batches.append(list(bodies))

    seen_turns: list[int] = []

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        # Record before act: the turn asking for this call is committed already.
        committed = [b for batch in batches for b in batch if isinstance(b, LlmTurn)]
        seen_turns.append(len(committed))
        return f"found {q}"

    node = llm("n", tools=["lookup"], output_keys=["a"], success_criteria=["be right"])
    provider = ScriptedProvider(
        [
            reply("looking", call("lookup", q="x")),
            reply("again", call("lookup", q="y")),
            reply("", set_output("a", 1)),
            reply("done"),
            reply("really done"),
        ],
        judge=['{"verdict": "RETRY", "feedback": "check it"}', '{"verdict": "ACCEPT"}'],
    )
    async with Runtime(tmp_path / "run.db", provider=provider, tools=[lookup], hooks=[count]) as rt:
        result = await (await rt.start(graph([node]))).result()
    assert result.status == "completed"
    conversation = (LlmTurn, ToolResult, OutputSet, Verdict, MessageAdded)
    node_batches = [b for b in batches if any(isinstance(x, conversation) for x in b)]
    turns = sum(isinstance(x, LlmTurn) for b in batches for x in b)
    assert turns == 5
    assert len(node_batches) <= 2 * turns
    # The turn is alone in front of its tools; its results ride with the verdict.
    for batch in node_batches:
        if any(isinstance(x, ToolResult) for x in batch):
            assert any(isinstance(x, Verdict) for x in batch)
    assert seen_turns == [1, 2]
    verdicts = [x for b in batches for x in b if isinstance(x, Verdict)]
    assert [(v.action, v.level) for v in verdicts][-2:] == [
        ("retry", "quality"),
        ("accept", "quality"),
    ]


async def test_cancel_reaches_an_llm_node_whose_model_never_suspends() -> None:
    five = anyio.Event()
    calls = 0

    def model(request: LlmRequest) -> LlmResponse:
        nonlocal calls
        calls += 1
        if calls == 5:
            five.set()
        return reply("", set_output("a", calls))  # new values: never a stall

    node = llm("n", output_keys=["a"], max_iterations=10_000, judge_every_n_turns=10_000)
    async with Runtime(None, provider=ScriptedProvider(model)) as rt:
        handle = await rt.start(graph([node]))
        await five.wait()
        await rt.cancel(handle.run_id)
        result = await handle.result()
    assert result.status == "cancelled"
    assert result.resume_at == ["n"]
    assert 1 <= result.memory["a"] <= calls < 10_000  # the partial output, flushed
