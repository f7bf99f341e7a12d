"""The agreement analysis example: judge RETRY on extraction, then a human approval pause."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from examples.agreement_analysis import FUNCTIONS, run_until_review, scripted_model
from runtime import Runtime
from runtime.events import Verdict

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_extraction_is_retried_by_the_judge_then_waits_for_approval(tmp_path: Path) -> None:
    db = tmp_path / "agreement.db"
    model = scripted_model()
    paused = await run_until_review(db, model=model)
    assert paused.status == "paused" and paused.paused_reason == "hitl"
    assert paused.resume_at == ["review"] and paused.path == ["extract"]
    assert model.calls == 4
    # Level 0 named the missing key, and its feedback went back to the model.
    retry_prompt = model.requests[2].messages[-1].content
    assert "obligations" in retry_prompt

    async with Runtime(db, functions=FUNCTIONS, provider=scripted_model()) as rt:
        approved = await rt.approve(
            paused.run_id, by="Dana", input={"approved": True, "reviewer": "Dana"}
        )
        assert approved is not None
        result = await approved.result()
        events = [e.body for e in await rt.read_events(paused.run_id)]

    assert result.status == "completed" and result.path == ["extract", "review", "report"]
    assert "Review: approved by Dana" in result.memory["report"]
    retries = [v for v in events if isinstance(v, Verdict) and v.action == "retry"]
    assert [(v.level, "obligations" in v.feedback) for v in retries] == [
        ("bail_out", False),  # the tool turn: keep working
        ("structural", True),  # Level 0: the missing key, named
        ("bail_out", False),
    ]
    assert result.verdicts["extract"]["accept"] == 1
    assert result.iterations == {"extract": 4}
    outcome = result.goal_outcome
    assert outcome is not None
    assert {c.id: c.met for c in outcome.criteria} == {
        "approved": True,
        "obligations": True,
        "criterion_2": None,  # no evaluator: unscored
    }
    assert outcome.score == 1.0 and outcome.met is True


async def test_a_rejection_is_measured_by_the_scorecard_not_rerun(tmp_path: Path) -> None:
    db = tmp_path / "agreement.db"
    paused = await run_until_review(db)
    async with Runtime(db, functions=FUNCTIONS, provider=scripted_model()) as rt:
        approved = await rt.approve(
            paused.run_id, by="Eve", input={"approved": False, "reviewer": "Eve"}
        )
        assert approved is not None
        result = await approved.result()
    assert result.status == "completed" and result.memory["decision"] == "rejected"
    assert result.goal_outcome is not None and result.goal_outcome.met is False


async def test_the_example_runs_as_a_module() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = await anyio.run_process(
        [sys.executable, "-m", "examples.agreement_analysis"], cwd=ROOT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "Review: approved by Dana" in done.stdout.decode()
