"""``Runtime.replay`` of a run whose LLM node failed because its model call failed (after
the provider's retries, so no turn was recorded) comes out equal: the replay fails that
call again with the same error type, instead of stopping at "no recorded model answer"."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmResponse,
    MalformedResponseError,
    NodeSpec,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
    Runtime,
    ScriptedProvider,
)
from runtime.events import NodeFailed
from runtime.llm._tools import tool
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio


@tool
async def look(query: str) -> str:
    """Looks something up."""
    return f"found {query}"


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("openai", "connection failed calling http://127.0.0.1:1/chat/completions"),
        ProviderHTTPError("openai", "server error", status=503, retryable=True),
        ProviderTimeoutError("anthropic", "no answer within 30 s"),
        MalformedResponseError("openai", "response has no 'choices' field"),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("turns_before", [0, 1])
async def test_a_node_failed_by_its_model_call_replays_equal(
    tmp_path: Path, error: ProviderError, turns_before: int
) -> None:
    node = NodeSpec(id="ask", kind="llm", output_keys=["answer"], tools=["look"])
    graph = GraphSpec(id="g", entry_node="ask", nodes=[node])
    script: list[LlmResponse | ProviderError] = [
        reply("Looking.", tool_call("look", query="q"))
    ] * turns_before
    model = ScriptedProvider([*script, error])
    async with Runtime(tmp_path / "run.db", provider=model, tools=[look]) as rt:
        result = await (await rt.start(graph)).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
        report = await rt.replay(result.run_id)

    failed = [b for b in bodies if isinstance(b, NodeFailed)]
    assert result.status == "failed"
    assert [b.error_type for b in failed] == [type(error).__name__]
    assert report.equal, report.summary()
    assert report.model_calls == turns_before + 1


async def test_a_changed_graph_still_diverges_after_a_recorded_failure(tmp_path: Path) -> None:
    node = NodeSpec(id="ask", kind="llm", output_keys=["answer"])
    graph = GraphSpec(id="g", entry_node="ask", nodes=[node])
    model = ScriptedProvider([ProviderHTTPError("openai", "overloaded", status=529)])
    async with Runtime(tmp_path / "run.db", provider=model) as rt:
        result = await (await rt.start(graph)).result()
        other = GraphSpec(
            id="g",
            entry_node="ask",
            nodes=[node, NodeSpec(id="recover", function="recover")],
            edges=[EdgeSpec(source="ask", target="recover", condition="on_failure")],
        )
        report = await rt.replay(result.run_id, graph=other)
    assert result.status == "failed"
    assert not report.equal
    assert "recover" in report.summary()
