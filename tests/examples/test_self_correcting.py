"""The self-correcting example: a producer gated by two verifiers, run offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from eventstore import SqliteEventStore
from examples.self_correcting import build_graph, run_loop, scripted_critic
from runtime.events import VerificationRecorded, fold

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_loop_redrafts_until_both_verifiers_pass(tmp_path: Path) -> None:
    db = tmp_path / "loop.db"
    critic = scripted_critic()
    result = await run_loop(db, critic=critic)
    assert result.status == "completed" and result.quality == "clean"
    assert result.path == [
        "draft", "check_length",                   # too short: back to the draft
        "draft", "check_length", "check_quality",  # 0.5: back to the draft
        "draft", "check_length", "check_quality",  # 0.92
        "publish",
    ]  # fmt: skip
    assert critic.calls == 2
    assert result.memory["quality"]["score"] == 0.92
    assert result.memory["published"].startswith("[published after 3 drafts]")
    async with SqliteEventStore(db) as store:
        events = await store.read_all(result.run_id)
        assert (await store.verify(result.run_id)).ok
    checks = [e.body for e in events if isinstance(e.body, VerificationRecorded)]
    assert [(c.node_id, c.passed) for c in checks] == [
        ("check_length", False),
        ("check_length", True),
        ("check_quality", False),
        ("check_length", True),
        ("check_quality", True),
    ]
    assert fold(events).memory == result.memory


async def test_max_steps_bounds_a_loop_that_never_passes() -> None:
    from examples.self_correcting import FUNCTIONS
    from runtime import Runtime, ScriptedProvider

    harsh = ScriptedProvider(lambda request: '{"score": 0.1}', name="critic")
    async with Runtime(None, functions=FUNCTIONS, providers={"critic": harsh}) as rt:
        result = await (await rt.start(build_graph(max_steps=12))).result()
    assert result.status == "failed" and "max_steps (12)" in (result.error or "")
    assert result.steps == 12


async def test_the_example_runs_as_a_module() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = await anyio.run_process(
        [sys.executable, "-m", "examples.self_correcting"], cwd=ROOT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "status: completed" in done.stdout.decode()
