"""A turn cut at the token cap twice is no answer, but both of its calls were paid for: the
node records it as a cut turn (``llm.turn`` with the ``max_tokens`` stop, the tokens of
both calls, no tool calls) before it fails with TruncatedError, so its tokens reach the
run's report and the metrics; a replay serves it as the same failure, and a resume after
a crash there fails without asking the model again."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime import Runtime
from runtime.events import LlmTurn, NodeFailed
from runtime.observe import RuntimeMetrics
from runtime.providers._base import LlmResponse, Usage
from runtime.providers._openai import OpenAIProvider
from runtime.providers._scripted import ScriptedProvider, reply
from runtime.reads import RunReader

from .llm_servers import OpenAIServer, openai_completion
from .test_llm_node import graph, llm, of, run_graph, set_output

pytestmark = pytest.mark.anyio


def cut(text: str, *, given: int = 100, written: int) -> LlmResponse:
    return LlmResponse(
        text=text,
        usage=Usage(input_tokens=given, output_tokens=written, input_cached=given // 2),
        stop="max_tokens",
        stop_reason="max_tokens",
        model="m-1",
    )


def twice_cut() -> ScriptedProvider:
    return ScriptedProvider(
        [cut("The answer is", written=4096), cut("The answer is long", given=101, written=8192)]
    )


async def test_a_turn_cut_twice_is_recorded_with_the_tokens_of_both_calls(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    node = llm("n", output_keys=["a"])
    result, events = await run_graph(
        tmp_path, graph([node]), twice_cut(), metrics=RuntimeMetrics(registry)
    )
    assert result.status == "failed"
    [turn] = of(events, LlmTurn)
    assert (turn.stop, turn.text, turn.tool_calls) == ("max_tokens", "The answer is long", [])
    assert (turn.input_tokens, turn.output_tokens) == (201, 4096 + 8192)
    assert turn.input_cached == 50 + 50
    [failed] = of(events, NodeFailed)
    assert (failed.error_type, failed.error) == (
        "TruncatedError",
        "scripted: truncated at 8192 tokens",
    )
    assert events.index(turn) < events.index(failed)
    async with Runtime(tmp_path / "run.db") as rt:
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)
    assert (report.tokens.input, report.tokens.output) == (201, 12288)
    sample = registry.get_sample_value
    assert sample("magistrate_llm_tokens_total", {"direction": "output"}) == 12288
    assert sample("magistrate_llm_tokens_total", {"direction": "input"}) == 201


async def test_a_run_with_a_turn_cut_twice_replays_equal(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"])
    result, _ = await run_graph(tmp_path, graph([node]), twice_cut())
    async with Runtime(tmp_path / "run.db") as rt:
        report = await rt.replay(result.run_id)
    # Before, the replay served the cut turn as an answer to be asked again, and stopped
    # ("no recorded model answer ... turn 2"), or had no turn to serve at all.
    assert report.equal, report.summary()
    assert report.stopped is None and report.model_calls == 1


async def test_a_turn_cut_twice_recorded_before_a_crash_fails_without_asking_again(
    tmp_path: Path,
) -> None:
    node = llm("n", output_keys=["a"])
    first, events = await run_graph(tmp_path, graph([node]), twice_cut())
    seq = 1 + [type(e) for e in events].index(LlmTurn)  # seqs count from 1
    # A fork at the cut turn resumes the node as a restart after a crash there would.
    again = ScriptedProvider([reply("", set_output("a", 1)), reply("done")])
    async with Runtime(tmp_path / "run.db", provider=again) as rt:
        fork = await rt.fork(first.run_id, seq)
        result = await fork.result()
        forked = [e.body for e in await rt.read_events(fork.run_id)]
    assert result.status == "failed" and again.calls == 0
    [failed] = of(forked, NodeFailed)
    assert failed.error_type == "TruncatedError"
    assert "cut at the token cap" in failed.error


async def test_an_openai_answer_cut_twice_over_http_records_what_was_billed(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    for written in (300, 9000):
        openai_server.respond(
            openai_completion(
                "Once upon", prompt_tokens=40, completion_tokens=written, finish_reason="length"
            )
        )
    provider = OpenAIProvider(api_key=openai_server.api_key, base_url=openai_server.base_url)
    node = llm("n", output_keys=["a"])
    async with Runtime(tmp_path / "run.db", provider=provider) as rt:
        handle = await rt.start(graph([node]))
        result = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    await provider.aclose()
    assert result.status == "failed"
    [turn] = of(events, LlmTurn)
    assert (turn.stop, turn.input_tokens, turn.output_tokens) == ("max_tokens", 80, 9300)
    stats = provider.statistics()
    assert (stats.input_tokens, stats.output_tokens) == (80, 9300)  # the log agrees
    first, again = openai_server.bodies()
    assert "max_completion_tokens" not in first and again["max_completion_tokens"] >= 8192
