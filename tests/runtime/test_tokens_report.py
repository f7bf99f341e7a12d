"""The run's report counts the calls the run itself paid for: a fork's copied events are
its source's calls (counted in the source's report and in the metrics when they were
made), and a custom judge that reports the usage of its own model calls has it recorded
and counted as the Level 2 judge's is."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime import LlmResponse, Runtime, RuntimeMetrics, ScriptedProvider, Usage
from runtime.events import EdgeTaken, Verdict
from runtime.llm import JudgeContext, JudgeVerdict
from runtime.reads import RunReader, Tokens

from .test_llm_node import edge, graph, llm, of, set_output

pytestmark = pytest.mark.anyio


def turn(key: str, n: int) -> list[LlmResponse]:
    """A node's two turns: it sets ``key``, then says it is done (``n`` input tokens each)."""
    used = Usage(input_tokens=n, output_tokens=1)
    return [
        LlmResponse(tool_calls=[set_output(key, "v")], usage=used, stop="tool_use"),
        LlmResponse(text="done", usage=used, stop="end"),
    ]


async def test_a_forks_report_counts_its_own_calls_not_its_sources(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    two = graph([llm("a", output_keys=["a"]), llm("b", output_keys=["b"])], [edge("a", "b")])
    async with Runtime(
        tmp_path / "r.db",
        provider=ScriptedProvider([*turn("a", 100), *turn("b", 20)]),
        metrics=metrics,
    ) as rt:
        source = await (await rt.start(two)).result()
        events = await rt.read_events(source.run_id)
    [after_a] = [e.seq for e in events if isinstance(e.body, EdgeTaken)]
    async with Runtime(
        tmp_path / "r.db", provider=ScriptedProvider(turn("b", 3)), metrics=metrics
    ) as rt:
        fork = await rt.fork(source.run_id, after_a)
        forked = await fork.result()
        assert rt.store is not None
        reader = RunReader(rt.store)
        source_report = await reader.report(source.run_id)
        fork_report = await reader.report(fork.run_id)
    assert forked.status == "completed"
    assert source_report.tokens == Tokens(input=240, output=4)
    # Before, the fork's report counted the copy of `a`'s turns too (200 more).
    assert fork_report.tokens == Tokens(input=6, output=2)
    # Every run's report adds up to what the process counted, each call once.
    counted = registry.get_sample_value("magistrate_llm_tokens_total", {"direction": "input"})
    assert counted == source_report.tokens.input + fork_report.tokens.input


class Priced:
    """A custom judge that calls a model of its own and says what it cost."""

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        return JudgeVerdict(
            action="accept", level="custom", usage=Usage(input_tokens=7, output_tokens=3)
        )


async def test_a_custom_judges_reported_usage_is_recorded_and_counted(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    node = llm("a", output_keys=["a"], judge="priced")
    async with Runtime(
        tmp_path / "r.db",
        provider=ScriptedProvider(turn("a", 100)[:1]),
        judges={"priced": Priced()},
        metrics=RuntimeMetrics(registry),
    ) as rt:
        result = await (await rt.start(graph([node]))).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)
    judged = [v for v in of(events, Verdict) if v.level == "custom"]
    assert [(v.action, v.input_tokens, v.output_tokens) for v in judged] == [("accept", 7, 3)]
    assert report.tokens_by_purpose["judge"] == Tokens(input=7, output=3)
    assert report.tokens == Tokens(input=107, output=4)
    sample = registry.get_sample_value
    assert sample("magistrate_llm_tokens_total", {"direction": "input"}) == 107


async def test_a_fork_of_a_fork_counts_its_own_calls_once(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    nodes = [llm("a", output_keys=["a"]), llm("b", output_keys=["b"]), llm("c", output_keys=["c"])]
    three = graph(nodes, [edge("a", "b"), edge("b", "c")])
    script = [*turn("a", 100), *turn("b", 20), *turn("c", 3)]
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider(script), metrics=metrics) as rt:
        source = await (await rt.start(three)).result()
        events = await rt.read_events(source.run_id)
    after_a = next(e.seq for e in events if isinstance(e.body, EdgeTaken))
    async with Runtime(
        tmp_path / "r.db",
        provider=ScriptedProvider([*turn("b", 40), *turn("c", 5)]),
        metrics=metrics,
    ) as rt:
        first = await rt.fork(source.run_id, after_a)
        await first.result()
        forked = await rt.read_events(first.run_id)
    after_b = [e.seq for e in forked if isinstance(e.body, EdgeTaken)][1]
    async with Runtime(
        tmp_path / "r.db", provider=ScriptedProvider(turn("c", 7)), metrics=metrics
    ) as rt:
        second = await rt.fork(first.run_id, after_b)
        assert (await second.result()).status == "completed"
        assert rt.store is not None
        reader = RunReader(rt.store)
        reports = [await reader.report(r) for r in (source.run_id, first.run_id, second.run_id)]
    assert [r.tokens.input for r in reports] == [246, 90, 14]
    counted = registry.get_sample_value("magistrate_llm_tokens_total", {"direction": "input"})
    assert counted == 246 + 90 + 14


class Garbled:
    """A custom judge whose usage is no Usage."""

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        return JudgeVerdict(action="accept", level="custom", usage={"input_tokens": 7})  # type: ignore[arg-type]


async def test_a_custom_judges_usage_that_is_no_usage_is_a_judge_failure(tmp_path: Path) -> None:
    node = llm("a", output_keys=["a"], judge="garbled")
    async with Runtime(
        tmp_path / "r.db",
        provider=ScriptedProvider(turn("a", 100)),
        judges={"garbled": Garbled()},
    ) as rt:
        result = await (await rt.start(graph([node]))).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
    # The run goes on (fail-open), the verdict says why, and the log reads back.
    verdicts = of(events, Verdict)
    assert [(v.action, v.input_tokens) for v in verdicts] == [("retry", 0), ("accept", 0)]
    assert all("expected a Usage or None" in (v.error or "") for v in verdicts)
    assert result.status == "completed"


class Impossible:
    """A custom judge whose usage holds a count that cannot be true."""

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        return JudgeVerdict(action="accept", level="custom", usage=Usage(input_tokens=-7))


async def test_a_custom_judges_impossible_token_count_is_a_judge_failure_not_recorded(
    tmp_path: Path,
) -> None:
    node = llm("a", output_keys=["a"], judge="impossible")
    async with Runtime(
        tmp_path / "r.db",
        provider=ScriptedProvider(turn("a", 100)),
        judges={"impossible": Impossible()},
    ) as rt:
        result = await (await rt.start(graph([node]))).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
    verdicts = of(events, Verdict)
    assert verdicts and all(v.input_tokens >= 0 for v in verdicts)
    assert all("usage.input_tokens = -7" in (v.error or "") for v in verdicts)
    assert result.status == "completed"
