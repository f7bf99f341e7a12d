"""A custom judge's verdict is a struct its author builds, which msgspec does not check
when built: what it holds must be what the log can write and read back the same, so the
live state equals the fold of the log, and the log stays readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import JudgeContext, JudgeVerdict, NodeSpec, Runtime
from runtime.events import Verdict
from runtime.events._state import fold
from runtime.testing import ScriptedProvider, linear_graph, reply

pytestmark = pytest.mark.anyio


class Giving:
    def __init__(self, verdict: JudgeVerdict) -> None:
        self.verdict = verdict

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        return self.verdict


def _node() -> NodeSpec:
    return NodeSpec(id="n", kind="llm", judge="mine", output_keys=[])


@pytest.mark.parametrize(
    ("confidence", "kept"),
    [(float("nan"), None), (float("inf"), 1.0), (-2, 0.0), (0.25, 0.25), (1, 1.0)],
)
async def test_a_confidence_is_kept_as_the_log_reads_it_back(
    tmp_path: Path, confidence: float, kept: float | None
) -> None:
    verdict = JudgeVerdict(action="accept", level="custom", confidence=confidence)
    provider = ScriptedProvider([reply("done")])
    judges = {"mine": Giving(verdict)}
    async with Runtime(tmp_path / "r.db", provider=provider, judges=judges) as rt:
        result = await (await rt.start(linear_graph([_node()]))).result()
        assert result.status == "completed", result.error
        events = await rt.read_events(result.run_id)
        [recorded] = [e.body for e in events if type(e.body) is Verdict]
        assert recorded.confidence == kept and result.quality == "clean"
        state = await rt.get_state(result.run_id)
    assert state.verdict_history["n"][-1].confidence == kept
    assert fold(events).verdict_history == state.verdict_history


@pytest.mark.parametrize(
    "verdict",
    [
        JudgeVerdict(action="accept", level="custom", confidence="high"),  # type: ignore[arg-type]
        JudgeVerdict(action="accept", level="custom", confidence=True),
        JudgeVerdict(action="retry", level="custom", feedback=None),  # type: ignore[arg-type]
    ],
)
async def test_a_value_the_log_cannot_hold_is_the_judges_failure(
    tmp_path: Path, verdict: JudgeVerdict
) -> None:
    provider = ScriptedProvider([reply("done")])
    judges = {"mine": Giving(verdict)}
    async with Runtime(tmp_path / "r.db", provider=provider, judges=judges) as rt:
        result = await (await rt.start(linear_graph([_node()]))).result()
        assert result.status == "completed", result.error
        assert result.quality == "degraded"  # the check did not run
        state = await rt.get_state(result.run_id)  # the log reads back
    [failure] = state.judge_failure_reasons
    assert failure.kind == "judge" and "custom judge failed: TypeError" in failure.reason
