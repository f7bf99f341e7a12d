"""The tokens of a Level 2 judge the node gave up on are in the log all the same.

An LLM node asks its judge with a timeout and stops it when no verdict comes in time.
The quality calls that judge had paid for (an attempt that answered nonsense, an answer
cut at the token cap before the call asked again hung, an answer that arrived as the
judge was being stopped) are recorded in the judge-failure verdict and counted in the
run's report and the token metric: all agree with the provider's ``statistics()``. So do
the tokens of an HTTP answer to the judge that could not be read but says what it cost.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from runtime import LlmRequest, LlmResponse, Runtime, RuntimeMetrics, TimeoutConfig, Usage
from runtime.events import LlmTurn, Verdict
from runtime.providers._openai import OpenAIProvider
from runtime.reads import RunReader, RunReport, Tokens
from runtime.testing import ScriptedProvider, tool_call

from .llm_servers import OpenAIServer, openai_completion
from .test_llm_node import graph, llm

pytestmark = pytest.mark.anyio

FIELDS = ("input_tokens", "output_tokens", "input_cached", "input_cache_write")
DIRECTIONS = ("input", "output", "input_cached", "input_cache_write")


def used(n: int) -> Usage:
    return Usage(input_tokens=100 * n, output_tokens=10 * n, input_cached=3 * n)


def turns() -> list[LlmResponse]:
    """The node's turns: it sets its output (no judge call: a tool turn), then is done."""
    return [
        LlmResponse(
            tool_calls=[tool_call("set_output", key="draft", value="Dear Ann")],
            usage=used(1),
            stop="tool_use",
        ),
        LlmResponse(text="Done.", usage=used(2)),
    ]


class SlowJudge(ScriptedProvider):
    """The scripted model, whose judge call number ``slow`` is slow: it waits until it is
    cancelled; then, with ``late=False``, its answer never comes (as an HTTP call
    abandoned before its answer: no usage, not in ``statistics()``), or, with
    ``late=True``, it comes all the same, the judge script's next answer, counted (as a
    call that runs to its end once made: a blocking SDK call in a worker thread)."""

    def __init__(self, *, judge: list[Any], slow: int, late: bool) -> None:
        super().__init__(turns(), judge=judge)
        self.slow = slow
        self.late = late
        self.judge_calls = 0
        self.cancelled = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        if request.purpose == "judge":
            self.judge_calls += 1
            if self.judge_calls == self.slow:
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    self.cancelled += 1
                    if not self.late:
                        raise
                # The answer arrived as the call was being abandoned.
        return await super().complete(request)


def logged(events: list[Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    for body in events:
        if isinstance(body, LlmTurn | Verdict):
            for name in FIELDS:
                total[name] += getattr(body, name)
    return total


def counted(stats: Any) -> Counter[str]:
    return Counter({name: getattr(stats, name) for name in FIELDS})


def reported(report: RunReport) -> Counter[str]:
    t = report.tokens
    counts = (t.input, t.output, t.input_cached, t.input_cache_write)
    return Counter(dict(zip(FIELDS, counts, strict=True)))


async def run(
    tmp_path: Path, provider: Any, **runtime: Any
) -> tuple[Any, list[Any], RunReport, Counter[str]]:
    """Run the one-node graph; its result, its log's bodies, its report and the token
    metric's counts (by event field name)."""
    registry = CollectorRegistry()
    node = llm("write", output_keys=["draft"], success_criteria=["the draft is polite"])
    async with Runtime(
        tmp_path / "run.db", provider=provider, metrics=RuntimeMetrics(registry), **runtime
    ) as rt:
        result = await (await rt.start(graph([node]))).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)
    metric: Counter[str] = Counter()
    for direction, name in zip(DIRECTIONS, FIELDS, strict=True):
        sample = {"direction": direction}
        metric[name] = int(registry.get_sample_value("magistrate_llm_tokens_total", sample) or 0)
    return result, events, report, metric


@pytest.mark.parametrize(
    ("text", "stop"),
    [
        # no verdict in it: asked again, and that call hangs
        pytest.param("hmm, hard to say", "end", id="unreadable-then-hung"),
        # cut at the token cap: asked once more with a larger cap, and that call hangs
        pytest.param('{"verdict": "ACC', "max_tokens", id="cut-then-hung-asking-again"),
    ],
)
async def test_a_judge_that_times_out_keeps_the_tokens_of_the_calls_it_paid_for(
    tmp_path: Path, text: str, stop: Any
) -> None:
    model = SlowJudge(judge=[LlmResponse(text=text, usage=used(7), stop=stop)], slow=2, late=False)
    result, events, report, metric = await run(tmp_path, model, timeouts=TimeoutConfig(judge=1.0))
    assert model.cancelled == 1  # the hung call was abandoned at the timeout
    assert result.status == "completed" and result.memory == {"draft": "Dear Ann"}
    [failed] = [v for v in events if isinstance(v, Verdict) and v.error]
    assert failed.error is not None and "no verdict within 1s" in failed.error
    assert failed.action == "accept"  # fail-open: the structure is complete
    # Before, the verdict of a judge given up on carried no tokens: 700 input were lost.
    assert (failed.input_tokens, failed.output_tokens, failed.input_cached) == (700, 70, 21)
    assert report.tokens_by_purpose["judge"] == Tokens(input=700, output=70, input_cached=21)
    stats = counted(model.statistics())
    assert stats["input_tokens"] == 100 * (1 + 2 + 7)
    assert logged(events) == stats
    assert reported(report) == stats
    assert metric == stats


async def test_an_answer_that_arrives_as_the_judge_is_given_up_on_is_counted(
    tmp_path: Path,
) -> None:
    # The judge's only call answers only once the node has given up on it: no verdict
    # (the timeout stands), but the provider was paid for the answer.
    accept = LlmResponse(text='{"verdict": "ACCEPT", "confidence": 0.9}', usage=used(5))
    model = SlowJudge(judge=[accept], slow=1, late=True)
    result, events, report, metric = await run(tmp_path, model, timeouts=TimeoutConfig(judge=1.0))
    assert model.cancelled == 1
    assert result.status == "completed"
    [failed] = [v for v in events if isinstance(v, Verdict) and v.error]
    assert failed.error is not None and "no verdict within 1s" in failed.error
    assert failed.level == "structural"  # the late ACCEPT is no verdict
    assert (failed.input_tokens, failed.output_tokens) == (500, 50)
    stats = counted(model.statistics())
    assert stats["input_tokens"] == 100 * (1 + 2 + 5)
    assert logged(events) == stats
    assert reported(report) == stats
    assert metric == stats


async def test_an_unreadable_but_billed_judge_answer_is_counted(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    unreadable = openai_completion('{"verdict": "ACCEPT"}', prompt_tokens=400, completion_tokens=4)
    unreadable["choices"] = []  # the answer cannot be read; its usage can
    openai_server.respond(
        openai_completion(
            "",
            tool_calls=[("c1", "set_output", '{"key": "draft", "value": "Dear Ann"}')],
            prompt_tokens=10,
            completion_tokens=1,
        )
    )
    openai_server.respond(openai_completion("Done.", prompt_tokens=20, completion_tokens=2))
    openai_server.respond(unreadable)
    openai_server.respond(
        openai_completion(
            '{"verdict": "ACCEPT", "confidence": 0.9}', prompt_tokens=30, completion_tokens=3
        )
    )
    async with OpenAIProvider(
        api_key=openai_server.api_key, base_url=openai_server.base_url, model="gpt-4o-mini"
    ) as model:
        result, events, report, metric = await run(tmp_path, model)
        stats = model.statistics()
    assert result.status == "completed"
    assert (stats.calls, stats.failures, stats.input_tokens) == (4, 1, 460)
    [quality] = [v for v in events if isinstance(v, Verdict) and v.level == "quality"]
    # Before, the unreadable answer's 400 tokens were in statistics() only.
    assert (quality.action, quality.input_tokens, quality.output_tokens) == ("accept", 430, 7)
    assert report.tokens == Tokens(input=460, output=10)
    assert metric["input_tokens"] == 460
