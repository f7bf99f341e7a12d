"""Each example's recorded run replays equal against its own graph, with no model, tool or
function called (the runtime that replays has none of them)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from examples.agreement_analysis.graph import run_until_review
from examples.self_correcting.loop import run_loop as run_self_correcting
from examples.travel_agent.demo import run_demo
from examples.validate_fix.loop import run_loop as run_validate_fix
from runtime import Runtime
from runtime.testing import assert_replays

pytestmark = pytest.mark.anyio


async def _replays(db: Path, run_id: str) -> None:
    async with Runtime(db) as rt:
        report = await assert_replays(rt, run_id)
    assert report.model_calls >= 0 and report.stopped is None


async def test_the_travel_agent_replays(tmp_path: Path) -> None:
    db = tmp_path / "travel.db"
    result = await run_demo(db_path=db, out=io.StringIO())
    await _replays(db, result.run_id)


async def test_the_agreement_analysis_replays_to_its_gate(tmp_path: Path) -> None:
    db = tmp_path / "agreement.db"
    result = await run_until_review(db)
    assert result.status == "paused"
    await _replays(db, result.run_id)


async def test_the_loops_replay(tmp_path: Path) -> None:
    for name, run in (("self.db", run_self_correcting), ("fix.db", run_validate_fix)):
        db = tmp_path / name
        result = await run(db)
        await _replays(db, result.run_id)
