"""The judge on an LLM node's path: a judge actor asked with a timeout, the judge-failure
rule (fail-open and fail-closed), the feedback a RETRY injects, what a custom judge sees."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from runtime import TimeoutConfig
from runtime._errors import ProviderError
from runtime.events import EdgeTaken, NodeFailed, Verdict
from runtime.llm._verdict import DEFAULT_RETRY_FEEDBACK, FEEDBACK_PREFIX, JudgeContext, JudgeVerdict
from runtime.providers._scripted import ScriptedProvider, reply

from .test_llm_node import edge, fn, graph, llm, noop, of, run_graph, set_output, texts

pytestmark = pytest.mark.anyio


class Hanging:
    """A custom judge that never answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        self.calls += 1
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_hanging_judge_is_a_judge_failure_after_the_timeout(tmp_path: Path) -> None:
    judge = Hanging()
    node = llm("n", output_keys=["a"], judge="slow")
    provider = ScriptedProvider([reply("", set_output("a", "x")), reply("done")])
    result, events = await run_graph(
        tmp_path, graph([node]), provider, judges={"slow": judge}, timeouts=TimeoutConfig(judge=0.2)
    )
    # Fail-open: the cascade without its quality check decides, and the log says why.
    assert result.status == "completed" and result.memory == {"a": "x"}
    verdicts = of(events, Verdict)
    assert [(v.action, v.level) for v in verdicts] == [
        ("retry", "bail_out"),
        ("accept", "structural"),
    ]
    assert all(v.error and "no verdict within 0.2s" in v.error for v in verdicts)
    assert judge.calls == 2  # a fresh judge actor after the abandoned one


class Raising:
    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        raise RuntimeError("judge bug")


async def test_a_raising_judge_is_a_judge_failure_that_asks_for_missing_keys(
    tmp_path: Path,
) -> None:
    node = llm("n", output_keys=["a"], judge="bad", max_iterations=3)
    provider = ScriptedProvider([reply("I am done"), reply("", set_output("a", 1)), reply("ok")])
    result, events = await run_graph(tmp_path, graph([node]), provider, judges={"bad": Raising()})
    assert result.memory == {"a": 1}
    verdicts = of(events, Verdict)
    assert [(v.action, v.level) for v in verdicts] == [
        ("retry", "structural"),
        ("retry", "bail_out"),
        ("accept", "structural"),
    ]
    assert all(v.error == "custom judge failed: RuntimeError: judge bug" for v in verdicts)


async def test_fail_closed_fails_the_node_with_the_judges_error(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["be good"], judge_fail_closed=True)
    down = ProviderError("judge", "rate limited", status=429)
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done"), reply("never asked")],
        judge=[down, down, down],
    )
    g = graph([node, fn("fallback")], [edge("n", "fallback", "on_failure")])
    result, events = await run_graph(tmp_path, g, provider, functions={"fallback": noop})
    assert result.path == ["n", "fallback"]
    assert result.quality == "degraded"
    last = of(events, Verdict)[-1]
    assert (last.action, last.level) == ("escalate", "quality")
    assert last.error is not None and "rate limited" in last.error
    (failed,) = of(events, NodeFailed)
    assert failed.error_type == "Escalated" and "rate limited" in failed.error
    assert [(e.source, e.condition) for e in of(events, EdgeTaken)] == [("n", "on_failure")]
    assert provider.calls_for("turn") == 2


async def test_fail_closed_custom_judge_that_hangs_fails_the_node(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], judge="slow", judge_fail_closed=True)
    provider = ScriptedProvider([reply("", set_output("a", "x"))])
    result, events = await run_graph(
        tmp_path,
        graph([node]),
        provider,
        judges={"slow": Hanging()},
        timeouts=TimeoutConfig(judge=0.1),
    )
    assert result.status == "failed"
    (verdict,) = of(events, Verdict)
    assert (verdict.action, verdict.level) == ("escalate", "custom")
    assert verdict.error is not None and "no verdict within" in verdict.error


async def test_a_quality_retry_without_feedback_injects_a_default_sentence(
    tmp_path: Path,
) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["be good"])
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done"), reply("better now")],
        judge=['{"verdict": "RETRY"}', '{"verdict": "ACCEPT"}'],
    )
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "completed"
    retry = of(events, Verdict)[1]
    assert (retry.action, retry.level, retry.feedback) == (
        "retry",
        "quality",
        DEFAULT_RETRY_FEEDBACK,
    )
    third = provider.requests_for("turn")[2]
    assert texts(third)[-1] == FEEDBACK_PREFIX + DEFAULT_RETRY_FEEDBACK


class Recording:
    def __init__(self) -> None:
        self.contexts: list[JudgeContext] = []

    async def evaluate(self, context: JudgeContext) -> str:
        self.contexts.append(context)
        return "accept" if context.iteration >= 2 else "retry"


async def test_a_custom_judge_reads_a_conversation_summary(tmp_path: Path) -> None:
    judge = Recording()
    node = llm("n", output_keys=["a"], judge="rec")
    provider = ScriptedProvider(
        [reply("Looking up the fare.", set_output("a", 120)), reply("The fare is 120 EUR.")]
    )
    result, _ = await run_graph(
        tmp_path, graph([node]), provider, judges={"rec": judge}, input={"city": "Lisbon"}
    )
    assert result.status == "completed"
    first, second = (c.conversation_summary for c in judge.contexts)
    assert "city: Lisbon" in first and "Looking up the fare." in first
    assert "called set_output" in first
    assert second.endswith("assistant: The fare is 120 EUR.")
