"""A run killed in the middle of a parallel round resumes without re-asking any model."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from runtime import Runtime, ScriptedProvider, tool
from runtime.events import BranchesSelected, BranchFinished, BranchToolResult, BranchTurn
from runtime.testing import reply, tool_call

from .crashes import resume_once_lease_expired

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: capital of France"


async def test_a_killed_round_resumes_from_its_recorded_branch_turns(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    process = await anyio.run_process(
        [sys.executable, "-m", "tests.runtime.parallel_crash_script", str(db), "r"],
        cwd=ROOT,
        check=False,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()

    done0, done1 = ScriptedProvider([]), ScriptedProvider([])  # any call: script exhausted
    branch2 = ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="Paris!")), "Paris!"]
    )
    judge = ScriptedProvider(["Response 3"])
    providers = {"p0": done0, "p1": done1, "p2": branch2, "judge": judge}
    async with Runtime(
        db, provider=ScriptedProvider([]), providers=providers, tools=[lookup]
    ) as rt:
        before = [e.body for e in await rt.read_events("r")]
        result = await (await resume_once_lease_expired(rt, "r")).result()
        events = [e.body for e in await rt.read_events("r")]
        assert rt.store is not None and (await rt.store.verify("r")).ok

    assert sum(isinstance(b, BranchFinished) for b in before) == 2
    assert not any(isinstance(b, BranchesSelected) for b in before)
    assert done0.calls == done1.calls == 0 and judge.calls == 1
    # Branch 2's recorded turn was not sent again: its tool ran, then the model continued.
    assert branch2.calls == 2
    first = branch2.requests[0].messages
    assert first[-2].tool_calls[0].id == "look-1" and first[-1].content.startswith("Paris:")
    turns = [b for b in events if isinstance(b, BranchTurn) and b.branch == 2]
    assert [t.iteration for t in turns] == [1, 2, 3]
    results = [r.call_id for r in events if isinstance(r, BranchToolResult) and r.branch == 2]
    assert results[:1] == ["look-1"]
    selected = next(b for b in events if isinstance(b, BranchesSelected))
    assert selected.winner == 2 and result.memory["answer"] == "Paris!"
    assert result.status == "completed"
