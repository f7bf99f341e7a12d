"""The tokens of an ``llm_decide`` router's and the goal evaluator's calls are recorded
as every other caller's: a cut answer was paid for, so when asking once more fails (a
5xx, a timeout) its tokens are in ``edge.taken``'s ``usage`` or ``run.finished``'s
``goal_*`` counts all the same.

And what a provider returns is checked where its answer enters a run, so the log never
holds a figure that cannot be true: a token count that is no whole number >= 0 is a
``MalformedResponseError`` naming the provider and the field (nothing of it recorded), a
latency that is NaN, infinite or negative is replaced by the runtime's own measurement
(before, a NaN made the log unreadable).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    EdgeSpec,
    Goal,
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    ProviderHTTPError,
    ProviderTimeoutError,
    RetryPolicy,
    Runtime,
    TruncatedError,
    Usage,
)
from runtime.events import EdgeTaken, LlmTurn, NodeFailed, RunFinished
from runtime.providers._openai import OpenAIProvider
from runtime.reads import RunReader, Tokens
from runtime.testing import ScriptedProvider

from .llm_servers import OpenAIServer, openai_completion

pytestmark = pytest.mark.anyio

ROUTED = GraphSpec(
    id="choose",
    entry_node="a",
    nodes=[
        NodeSpec(id="a", kind="function", function="a"),
        NodeSpec(id="b", kind="function", function="b"),
        NodeSpec(id="c", kind="function", function="c"),
    ],
    edges=[
        EdgeSpec(source="a", target="b", condition="llm_decide", fallback="c"),
        EdgeSpec(source="a", target="c", condition="llm_decide", fallback="c"),
    ],
)
FUNCTIONS = {"a": lambda i: {"hours": 3}, "b": lambda i: {"went": "b"}, "c": lambda i: {}}
GOAL = Goal(description="Log the hours.", success_criteria=["Reads well"], evaluator="critic")
SCORED = GraphSpec(
    id="scored",
    goal=GOAL,
    entry_node="a",
    nodes=[NodeSpec(id="a", kind="function", function="a")],
)
#: An answer cut at the token cap, paid for: 120 tokens in, 256 out.
CUT = LlmResponse(
    text='{"target": "b", "reas',
    usage=Usage(input_tokens=120, output_tokens=256, input_cached=20),
    stop="max_tokens",
    stop_reason="max_tokens",
)
PAID = Usage(input_tokens=120, output_tokens=256, input_cached=20)
FAILURES = [
    ProviderHTTPError("scripted", "overloaded", status=503),
    ProviderTimeoutError("scripted", "no answer within 600s"),
]


async def recorded(tmp_path: Path, spec: GraphSpec, **runtime: Any) -> tuple[Any, list[Any], Any]:
    """Run ``spec``; its result, and its log's bodies and report as a new runtime reads
    them back from the file (the log must read back)."""
    db = tmp_path / "runs.db"
    async with Runtime(db, functions=FUNCTIONS, **runtime) as rt:
        result = await (await rt.start(spec)).result()
    async with Runtime(db, functions=FUNCTIONS) as rt:
        events = [e.body for e in await rt.read_events(result.run_id)]
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)
    return result, events, report


def routed_edge(events: list[Any]) -> EdgeTaken:
    [edge] = [e for e in events if isinstance(e, EdgeTaken) and e.condition == "llm_decide"]
    return edge


def finished(events: list[Any]) -> RunFinished:
    [end] = [e for e in events if isinstance(e, RunFinished)]
    return end


def goal_usage(end: RunFinished) -> Usage:
    return Usage(
        input_tokens=end.goal_input_tokens,
        output_tokens=end.goal_output_tokens,
        input_cached=end.goal_input_cached,
        input_cache_write=end.goal_input_cache_write,
    )


# ------------------------------------------------------------------ a cut answer, re-ask fails


@pytest.mark.parametrize("failure", FAILURES, ids=["503", "timeout"])
async def test_a_routers_cut_answer_whose_reask_fails_is_recorded_in_edge_taken(
    tmp_path: Path, failure: Exception
) -> None:
    provider = ScriptedProvider([], router=[CUT, failure])
    result, events, report = await recorded(tmp_path, ROUTED, provider=provider)
    assert result.status == "completed" and result.path == ["a", "c"]  # the fallback
    assert provider.calls_for("route") == 2
    edge = routed_edge(events)
    assert edge.target == "c" and type(failure).__name__ in (edge.judge_error or "")
    # Before, the cut call's tokens were recorded nowhere.
    assert edge.usage == PAID
    assert report.tokens_by_purpose == {"route": Tokens(input=120, output=256, input_cached=20)}


@pytest.mark.parametrize("failure", FAILURES, ids=["503", "timeout"])
async def test_a_goal_evaluators_cut_answer_whose_reask_fails_is_recorded_in_run_finished(
    tmp_path: Path, failure: Exception
) -> None:
    critic = ScriptedProvider([CUT, failure], name="critic")
    result, events, report = await recorded(tmp_path, SCORED, providers={"critic": critic})
    assert result.status == "completed" and result.quality == "degraded"  # unscored
    [criterion] = result.goal_outcome.criteria
    assert criterion.method == "unscored" and "the evaluator failed" in (criterion.error or "")
    assert critic.calls == 2
    # Before, run.finished's goal counts were 0: the cut call was recorded nowhere.
    assert goal_usage(finished(events)) == PAID
    assert report.tokens_by_purpose == {"outcome": Tokens(input=120, output=256, input_cached=20)}


async def test_over_http_a_routers_cut_answer_then_a_503_counts_as_the_provider_counts(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    cut = openai_completion('{"target"', prompt_tokens=120, completion_tokens=256)
    cut["choices"][0]["finish_reason"] = "length"
    openai_server.respond(cut)
    openai_server.respond(openai_server.error_body(503, "overloaded"), status=503)
    async with OpenAIProvider(
        api_key=openai_server.api_key, base_url=openai_server.base_url, max_retries=0
    ) as model:
        result, events, report = await recorded(tmp_path, ROUTED, provider=model)
        stats = model.statistics()
    assert result.path == ["a", "c"] and len(openai_server.requests) == 2
    edge = routed_edge(events)
    assert "ProviderHTTPError" in (edge.judge_error or "") and "503" in edge.judge_error
    assert edge.usage == Usage(input_tokens=120, output_tokens=256)
    assert (stats.input_tokens, stats.output_tokens) == (120, 256)
    assert report.tokens_by_purpose == {"route": Tokens(input=120, output=256)}


async def test_over_http_a_goal_evaluators_cut_answer_then_a_503_counts_as_the_provider_counts(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    cut = openai_completion('{"score": 0.', prompt_tokens=300, completion_tokens=512)
    cut["choices"][0]["finish_reason"] = "length"
    openai_server.respond(cut)
    openai_server.respond(openai_server.error_body(503, "overloaded"), status=503)
    async with OpenAIProvider(
        api_key=openai_server.api_key, base_url=openai_server.base_url, max_retries=0
    ) as critic:
        result, events, _ = await recorded(tmp_path, SCORED, providers={"critic": critic})
        stats = critic.statistics()
    assert result.goal_outcome.criteria[0].method == "unscored"
    assert goal_usage(finished(events)) == Usage(input_tokens=300, output_tokens=512)
    assert (stats.input_tokens, stats.output_tokens) == (300, 512)


# ------------------------------------------------------------------ impossible figures


def answering(response: LlmResponse) -> ScriptedProvider:
    """A provider (standing in for a user's own) giving ``response`` to every call."""
    return ScriptedProvider(lambda request: response, name="mine")


def llm_graph() -> GraphSpec:
    fast = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002, jitter=0.0)
    return GraphSpec(id="g", entry_node="l", nodes=[NodeSpec(id="l", kind="llm")], retry=fast)


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        (Usage(input_tokens=-5, output_tokens=3), "usage.input_tokens = -5"),
        (Usage(output_tokens=2.5), "usage.output_tokens = 2.5"),  # type: ignore[arg-type]
        (Usage(input_cached=True), "usage.input_cached = True"),
    ],
    ids=["negative", "fraction", "bool"],
)
async def test_a_turns_impossible_token_count_is_refused_naming_the_provider_and_field(
    tmp_path: Path, usage: Usage, field: str
) -> None:
    provider = answering(LlmResponse(text="done", usage=usage))
    result, events, report = await recorded(tmp_path, llm_graph(), provider=provider)
    assert result.status == "failed"
    failed = [e for e in events if isinstance(e, NodeFailed)]
    assert failed and all(f.error_type == "MalformedResponseError" for f in failed)
    assert f"mine: the answer has {field}, not a token count" in failed[-1].error
    assert "fix the provider's complete()" in failed[-1].error
    # Nothing of the refused answer is in the log.
    assert not [e for e in events if isinstance(e, LlmTurn)]
    assert all(f.usage is None for f in failed)
    assert report.tokens == Tokens(input=0, output=0)


async def test_a_failure_carrying_an_impossible_count_is_refused_too(tmp_path: Path) -> None:
    cut = LlmResponse(usage=Usage(input_tokens=-3), stop="max_tokens")
    provider = ScriptedProvider(lambda request: _raise(TruncatedError("mine", 0, response=cut)))
    result, events, _ = await recorded(tmp_path, llm_graph(), provider=provider)
    assert result.status == "failed"
    failed = [e for e in events if isinstance(e, NodeFailed)][-1]
    assert failed.error_type == "MalformedResponseError"
    assert "the TruncatedError it raised has usage.input_tokens = -3" in failed.error
    # Before, the cut turn was recorded with its -3 tokens.
    assert not [e for e in events if isinstance(e, LlmTurn)]


def _raise(exc: Exception) -> LlmResponse:
    raise exc


async def test_a_provider_returning_no_llm_response_is_refused(tmp_path: Path) -> None:
    class Mine:
        name = "mine"

        async def complete(self, request: LlmRequest) -> LlmResponse:
            return {"text": "done"}  # type: ignore[return-value]

    result, events, _ = await recorded(tmp_path, llm_graph(), provider=Mine())
    assert result.status == "failed"
    failed = [e for e in events if isinstance(e, NodeFailed)][-1]
    assert failed.error_type == "MalformedResponseError"
    assert "mine: complete() returned dict, not an LlmResponse" in failed.error


@pytest.mark.parametrize("latency", [math.nan, math.inf, -1000.0], ids=["nan", "inf", "neg"])
async def test_an_impossible_latency_is_replaced_by_the_measured_one(
    tmp_path: Path, latency: float
) -> None:
    provider = answering(LlmResponse(text="done", usage=Usage(input_tokens=7), latency_ms=latency))
    result, events, report = await recorded(tmp_path, llm_graph(), provider=provider)
    # Before, a NaN or infinite latency made the log unreadable (CorruptLogError), and a
    # negative one was recorded as it came.
    assert result.status == "completed"
    [turn] = [e for e in events if isinstance(e, LlmTurn)]
    assert math.isfinite(turn.latency_ms) and turn.latency_ms >= 0
    assert turn.input_tokens == 7 and report.tokens == Tokens(input=7, output=0)


async def test_a_routers_impossible_token_count_is_its_failure_and_not_recorded(
    tmp_path: Path,
) -> None:
    answer = LlmResponse(text='{"target": "b"}', usage=Usage(output_tokens=-1))
    provider = ScriptedProvider([], router=[answer])
    result, events, report = await recorded(tmp_path, ROUTED, provider=provider)
    assert result.path == ["a", "c"]  # the fallback: the answer was refused
    edge = routed_edge(events)
    assert edge.usage is None
    assert "MalformedResponseError: scripted: the answer has usage.output_tokens = -1" in (
        edge.judge_error or ""
    )
    assert report.tokens == Tokens(input=0, output=0)


async def test_a_goal_evaluators_impossible_token_count_leaves_it_unscored(
    tmp_path: Path,
) -> None:
    answer = LlmResponse(text='{"score": 1}', usage=Usage(input_tokens=-40))
    critic = ScriptedProvider([answer], name="critic")
    result, events, _ = await recorded(tmp_path, SCORED, providers={"critic": critic})
    [criterion] = result.goal_outcome.criteria
    assert criterion.method == "unscored"
    assert "critic: the answer has usage.input_tokens = -40" in (criterion.error or "")
    assert goal_usage(finished(events)) == Usage()
