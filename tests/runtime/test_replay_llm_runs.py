"""``Runtime.replay`` of LLM runs as they were recorded comes out equal: a conversation
resumed with input several times, a tool call that timed out, parallel branches that
finished in another order than the one they were started in."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from runtime import (
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    Runtime,
    ScriptedProvider,
)
from runtime.events import BranchTurn, NodeFailed
from runtime.llm._tools import tool
from runtime.spec import BranchJudgeSpec, BranchSpec, ParallelSpec
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio


def chat_graph(max_iterations: int) -> GraphSpec:
    node = NodeSpec(id="chat", kind="llm", client_facing=True, max_iterations=max_iterations)
    return GraphSpec(id="chat", entry_node="chat", nodes=[node])


async def test_a_conversation_resumed_with_input_again_and_again_replays_equal(
    tmp_path: Path,
) -> None:
    model = ScriptedProvider(lambda request: reply(f"Question {len(request.messages)}?"))
    async with Runtime(tmp_path / "run.db", provider=model) as rt:
        handle = await rt.start(chat_graph(4))
        result = await handle.result()
        run_id = handle.run_id
        # Input given with the resume, then injected before a resume without input.
        result = await (await rt.resume(run_id, input={"answer": "Lisbon"})).result()
        await rt.inject_input(run_id, {"answer": "Porto"})
        result = await (await rt.resume(run_id)).result()
        result = await (await rt.resume(run_id, input={"answer": "Faro"})).result()
        report = await rt.replay(run_id)

    assert result.status == "completed"
    shown = [m.content for m in model.requests[-1].messages if m.role == "user"]
    assert shown[-3:] == [
        "[User input]\n- answer: Lisbon",
        "[User input]\n- answer: Porto",
        "[User input]\n- answer: Faro",
    ]
    assert report.equal, report.summary()
    assert report.model_calls == 4


@tool
async def stuck(query: str) -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "never"


async def test_a_tool_call_that_timed_out_replays_equal(tmp_path: Path) -> None:
    node = NodeSpec(id="n", kind="llm", output_keys=["x"], tools=["stuck"], tool_timeout=0.1)
    model = ScriptedProvider([reply("Looking.", tool_call("stuck", query="q"))])
    async with Runtime(tmp_path / "run.db", provider=model, tools=[stuck]) as rt:
        result = await (await rt.start(GraphSpec(id="g", entry_node="n", nodes=[node]))).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
        report = await rt.replay(result.run_id)

    assert result.status == "failed"
    assert [b.error_type for b in bodies if isinstance(b, NodeFailed)] == ["ToolTimeoutError"]
    assert report.equal, report.summary()


class _Waiting:
    """A branch model that answers once ``go`` is set (by the other branch's model)."""

    def __init__(self, inner: ScriptedProvider, go: anyio.Event) -> None:
        self.name, self.inner, self.go = inner.name, inner, go

    async def complete(self, request: LlmRequest) -> LlmResponse:
        await self.go.wait()
        return await self.inner.complete(request)


def answering(text: str) -> ScriptedProvider:
    return ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value=text)), reply(text)]
    )


async def test_parallel_branches_recorded_out_of_order_replay_equal(tmp_path: Path) -> None:
    go = anyio.Event()

    def last_turn_lets_the_other_go(request: LlmRequest) -> LlmResponse:
        go.set()
        return reply("Paris")

    first = ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value="Paris")),
            last_turn_lets_the_other_go,
        ]
    )
    graph = GraphSpec(
        id="parallel",
        entry_node="answer",
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                output_keys=["answer"],
                parallel=ParallelSpec(
                    branches=[BranchSpec(label=f"b{i}", provider=f"p{i}") for i in range(2)],
                    strategy="llm_judge",
                    judge=BranchJudgeSpec(provider="judge"),
                ),
            )
        ],
    )
    providers = {
        "p0": _Waiting(answering("Lyon"), go),
        "p1": first,
        "judge": ScriptedProvider(["Response 2"]),
    }
    async with Runtime(
        tmp_path / "run.db", provider=ScriptedProvider([]), providers=providers
    ) as rt:
        result = await (await rt.start(graph)).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
        report = await rt.replay(result.run_id)

    assert (result.status, result.memory) == ("completed", {"answer": "Paris"})
    # Branch b1 ran first: the record interleaves the branches out of their order.
    assert next(b.branch for b in bodies if isinstance(b, BranchTurn)) == 1
    assert report.equal, report.summary()
