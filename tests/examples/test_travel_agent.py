"""The travel-agent demo, run in-process and as ``python -m``, judged by what it prints."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import anyio
import pytest

from eventstore import SqliteEventStore
from examples.travel_agent import run_demo
from examples.travel_agent.graph import build_graph, load_request
from examples.travel_agent.script import QUALITY_FEEDBACK
from runtime.events import LlmTurn, Verdict

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def verdict_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "judge.verdict" in line and "bail-out" not in line]


async def test_offline_demo_prints_level0_then_level2_retry_then_accept(tmp_path: Path) -> None:
    out = io.StringIO()
    db = tmp_path / "travel.db"
    result = await run_demo(db_path=db, out=out)
    printed = out.getvalue().splitlines()
    assert printed == result.lines
    assert result.ok and result.status == "completed" and result.quality == "clean"

    structural, quality_retry, accept = verdict_lines(printed)
    assert "RETRY [Level 0 structural]" in structural
    assert "Missing required output keys: budget_estimate." in structural
    assert "flight_options" not in structural.split(":", 1)[1]  # only the missing key
    assert "RETRY [Level 2 quality] confidence 0.86" in quality_retry
    assert QUALITY_FEEDBACK in quality_retry
    assert "ACCEPT [Level 2 quality]" in accept
    # The feedback of both RETRYs was injected into the conversation, in order.
    feedback = [line for line in printed if "message:feedback" in line]
    assert len(feedback) == 2
    assert "budget_estimate" in feedback[0] and QUALITY_FEEDBACK in feedback[1]
    # Tool calls, memory writes and the final lines are there too.
    assert any("search_flights(origin='LIS'" in line for line in printed)
    assert any("memory.written" in line and "budget_estimate" in line for line in printed)
    assert any(line.startswith("status: completed   quality: clean") for line in printed)
    assert "  - total: $2188" in printed

    # The timeline is the log: the same file, reopened, holds the same story.
    async with SqliteEventStore(db) as store:
        events = await store.read_all(result.run_id)
        assert (await store.verify(result.run_id)).ok
    verdicts = [e.body for e in events if isinstance(e.body, Verdict)]
    assert [(v.action, v.level) for v in verdicts if v.level != "bail_out"] == [
        ("retry", "structural"),
        ("retry", "quality"),
        ("accept", "quality"),
    ]
    assert sum(isinstance(e.body, LlmTurn) for e in events) == 7
    assert f"verify: ok ({len(events)} events, hash chain intact)" in printed
    seq_of_first_retry = next(
        e.seq for e in events if isinstance(e.body, Verdict) and e.body.level == "structural"
    )
    assert structural.lstrip().startswith(f"{seq_of_first_retry}  planner")


async def test_demo_as_a_module_exits_zero_with_a_verified_timeline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = await anyio.run_process(
        [sys.executable, "-m", "examples.travel_agent", "--db", str(tmp_path / "t.db")],
        cwd=ROOT,
        env=env,
        check=False,
    )
    text = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "Missing required output keys: budget_estimate" in text
    assert "RETRY [Level 2 quality]" in text
    assert "ACCEPT [Level 2 quality]" in text
    assert "status: completed" in text
    assert "verify: ok" in text


async def test_real_flag_without_a_key_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = await anyio.run_process(
        [sys.executable, "-m", "examples.travel_agent", "--real"], cwd=ROOT, env=env, check=False
    )
    assert done.returncode == 2
    assert "OPENAI_API_KEY or ANTHROPIC_API_KEY" in done.stderr.decode()


async def test_load_request_derives_nights_and_refuses_bad_dates() -> None:
    trip = load_request(
        {
            "request": {
                "origin": "LIS",
                "destination": "JFK",
                "city": "NY",
                "depart": "2025-05-12",
                "return": "2025-05-16",
            }
        }
    )
    assert trip["trip"]["nights"] == 4
    with pytest.raises(ValueError, match="not after departure"):
        load_request(
            {
                "request": {
                    "origin": "LIS",
                    "destination": "JFK",
                    "city": "NY",
                    "depart": "2025-05-16",
                    "return": "2025-05-12",
                }
            }
        )
    assert build_graph().node("planner").success_criteria == [
        "Provide specific flight numbers, hotel names with ratings, and itemized budget."
    ]
