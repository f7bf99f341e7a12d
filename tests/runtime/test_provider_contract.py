"""Contract tests: whole graphs and direct calls against loopback servers whose referee is
the official ``openai`` and ``anthropic`` SDKs (tests/runtime/sdk_referee.py). Every
request body the providers send is validated with the SDK's parameter types; every answer
is built from the SDK's response models, with fields the project does not know."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params

from runtime import Runtime, tool
from runtime.events import (
    BranchesJudged,
    EdgeTaken,
    LlmTurn,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._openai import OpenAIProvider
from runtime.spec import (
    BranchJudgeSpec,
    BranchSpec,
    EdgeSpec,
    Goal,
    GraphSpec,
    LlmJudgeVerifier,
    NodeSpec,
    ParallelSpec,
)

from .sdk_referee import (
    SdkAnthropicServer,
    SdkOpenAIServer,
    anthropic_answer,
    check,
    openai_answer,
)

pytestmark = pytest.mark.anyio

Server = SdkOpenAIServer | SdkAnthropicServer


@pytest.fixture(params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    made: Server = SdkOpenAIServer() if request.param == "openai" else SdkAnthropicServer()
    made.start()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
async def provider(server: Server) -> AsyncIterator[Any]:
    if isinstance(server, SdkOpenAIServer):
        made: Any = OpenAIProvider(api_key=server.api_key, base_url=server.base_url)
    else:
        made = AnthropicProvider(api_key=server.api_key, base_url=server.base_url)
    async with made:
        yield made


searched: list[str] = []


@tool
def search(query: str) -> str:
    """Search the notes."""
    searched.append(query)
    return f"notes about {query}"


@tool
def broken() -> str:
    """A tool that fails."""
    raise RuntimeError("the index is down")


def _graph() -> GraphSpec:
    """work (tools, set_output, Level 2 judge) -> llm_decide (ship | hold) -> verify
    (llm_judge) -> done; a goal with a criterion the model scores."""
    verifier = LlmJudgeVerifier(target_key="answer", evaluation_criteria="Clear.")
    return GraphSpec(
        id="contract",
        entry_node="work",
        terminal_nodes=["done"],
        goal=Goal(
            description="Answer the question.",
            success_criteria=["The answer is clear"],
            evaluator="critic",
        ),
        nodes=[
            NodeSpec(
                id="work",
                kind="llm",
                tools=["search", "broken"],
                output_keys=["answer"],
                success_criteria=["The answer is complete"],
            ),
            NodeSpec(id="ship", kind="function", function="noop", description="Ship it."),
            NodeSpec(id="hold", kind="function", function="noop", description="Hold it."),
            NodeSpec(
                id="verify",
                kind="verifier",
                output_keys=["verify_verification", "verify_verification_passed"],
                verifier=verifier,
            ),
            NodeSpec(id="done", kind="function", function="noop"),
        ],
        edges=[
            EdgeSpec(source="work", target="ship", condition="llm_decide", fallback="hold"),
            EdgeSpec(source="work", target="hold", condition="llm_decide", fallback="hold"),
            EdgeSpec(source="ship", target="verify"),
            EdgeSpec(source="hold", target="verify"),
            EdgeSpec(source="verify", target="done"),
        ],
    )


async def test_a_whole_graph_speaks_the_sdks_wire_format(server: Server, provider: Any) -> None:
    searched.clear()
    async with Runtime(
        None,
        provider=provider,
        providers={"critic": provider},
        tools=[search, broken],
        functions={"noop": lambda i: None},
    ) as rt:
        result = await (await rt.start(_graph(), input={"question": "why?"})).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
    assert server.violations == []
    assert (result.status, result.quality) == ("completed", "clean")
    assert result.path == ["work", "ship", "verify", "done"]
    # Parallel tool calls ran, the failing one went back as an error; set_output landed.
    assert sorted(searched) == ["a", "b"]
    errors = [r for r in bodies if isinstance(r, ToolResult) and r.is_error]
    assert [r.name for r in errors] == ["broken"]
    assert result.memory["answer"] == "done"
    turns = [b for b in bodies if isinstance(b, LlmTurn)]
    assert [t.stop for t in turns] == ["tool_use", "tool_use", "end"]
    assert all(t.input_cached > 0 for t in turns)
    verdict = [b for b in bodies if isinstance(b, Verdict)][-1]
    assert (verdict.action, verdict.level, verdict.error) == ("accept", "quality", None)
    [edge] = [b for b in bodies if isinstance(b, EdgeTaken) and b.source == "work"]
    assert edge.judge_error is None and edge.reason == "it fits"
    [verified] = [b for b in bodies if isinstance(b, VerificationRecorded)]
    assert verified.passed
    assert result.goal_outcome is not None
    assert [c.score for c in result.goal_outcome.criteria] == [0.8]
    # What was sent: a turn, its tool results (the error marked where the API has it).
    sent = [r.body for r in server.requests]
    assert len(sent) >= 7  # three turns, the judge, the router, the verifier, the goal
    assert all(check_again(server, body) is None for body in sent)
    if isinstance(server, SdkAnthropicServer):
        results = [
            b
            for body in sent
            for m in body["messages"]
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        assert any(b.get("is_error") for b in results)
        assert all("temperature" not in body for body in sent)
    else:
        judge = next(b for b in sent if "strict quality judge" in b["messages"][0]["content"])
        assert judge["reasoning_effort"] == "low" and "temperature" not in judge


def check_again(server: Server, body: dict[str, Any]) -> str | None:
    """The referee on a captured body (the server checked it as it came in)."""
    if isinstance(server, SdkOpenAIServer):
        return check(body, completion_create_params.CompletionCreateParamsNonStreaming)
    return check(body, message_create_params.MessageCreateParamsNonStreaming)


async def test_parallel_branches_and_their_judge_speak_the_sdks_wire_format(
    server: Server, provider: Any
) -> None:
    graph = GraphSpec(
        id="branches",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                tools=["search", "broken"],
                output_keys=["answer"],
                parallel=ParallelSpec(
                    branches=[BranchSpec(label=f"b{i}", temperature=0.2 * i) for i in range(3)],
                    strategy="llm_judge",
                    judge=BranchJudgeSpec(),
                ),
            )
        ],
    )
    async with Runtime(None, provider=provider, tools=[search, broken]) as rt:
        result = await (await rt.start(graph, input={"question": "why?"})).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
    assert server.violations == []
    assert result.status == "completed" and result.memory["answer"] == "done"
    [judged] = [b for b in bodies if isinstance(b, BranchesJudged)]
    assert judged.error is None and judged.text == "Response 2"


def ask(**kwargs: Any) -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hi")], **kwargs)


async def test_refusals_and_truncation_read_from_the_sdks_answers(
    server: Server, provider: Any
) -> None:
    if isinstance(server, SdkOpenAIServer):
        server.respond(openai_answer(None, refusal="I can't help with that."))
        cut = [("search", {"query": "x"})]
        server.respond(openai_answer(None, cut, finish_reason="length", raw_arguments='{"qu'))
    else:
        server.respond(anthropic_answer("I can't help with that.", stop_reason="refusal"))
        server.respond(anthropic_answer("", [("search", {"query": "x"})], stop_reason="max_tokens"))
    refused = await provider.complete(ask())
    truncated = await provider.complete(ask(tools=[search.spec()], max_tokens=10))
    assert server.violations == []
    assert (refused.stop, refused.text) == ("refusal", "I can't help with that.")
    assert (truncated.stop, truncated.tool_calls) == ("max_tokens", [])


def test_the_referee_refuses_what_the_sdks_refuse() -> None:
    anthropic_params = message_create_params.MessageCreateParamsNonStreaming
    good = {
        "model": "claude-haiku-5-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    }
    assert check(good, anthropic_params) is None
    assert "temperature" in str(check({**good, "temperature": 0.0}, anthropic_params))
    no_cap = {k: v for k, v in good.items() if k != "max_tokens"}
    assert "missing ['max_tokens']" in str(check(no_cap, anthropic_params))
    openai_params = completion_create_params.CompletionCreateParamsNonStreaming
    chat = {"model": "gpt-5.4-mini", "messages": [{"role": "user", "content": "Hi"}]}
    assert check(chat, openai_params) is None
    assert check({**chat, "max_tokens": "ten"}, openai_params) is not None
    bad_role = {**chat, "messages": [{"role": "robot", "content": "Hi"}]}
    assert check(bad_role, openai_params) is not None
