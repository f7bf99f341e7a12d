"""The validate-to-fix example: a verifier gates a fix loop; the goal scorecard measures it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from examples.validate_fix import run_loop
from runtime.events import VerificationRecorded, fold

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_loop_fixes_each_bad_entry_then_passes_validation(tmp_path: Path) -> None:
    from eventstore import SqliteEventStore

    db = tmp_path / "week.db"
    result = await run_loop(db)
    assert result.status == "completed" and result.quality == "clean"
    assert result.path == [
        "parse", "validate", "fix", "validate", "fix", "validate", "summarise",
    ]  # fmt: skip
    assert result.memory["fixes"] == ["Tue: 75 -> 7.5", "Thu: -7.5 -> 7.5"]
    assert result.memory["total_hours"] == 37.5
    assert result.visits == {"parse": 1, "validate": 3, "fix": 2, "summarise": 1}
    outcome = result.goal_outcome
    assert outcome is not None and outcome.met is True and outcome.score == 1.0
    async with SqliteEventStore(db) as store:
        events = await store.read_all(result.run_id)
    checks = [e.body for e in events if isinstance(e.body, VerificationRecorded)]
    assert [c.passed for c in checks] == [False, False, True]
    assert [len(c.result["extracted_value"]) for c in checks] == [2, 1, 0]
    assert fold(events).memory == result.memory


async def test_the_example_runs_as_a_module() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = await anyio.run_process(
        [sys.executable, "-m", "examples.validate_fix"], cwd=ROOT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "total: 37.5 hours" in done.stdout.decode()
