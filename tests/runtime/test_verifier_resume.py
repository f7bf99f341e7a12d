"""A verifier killed after its evaluator answered resumes without asking it again."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from runtime import Runtime, ScriptedProvider
from runtime.events import NodeCompleted, NodeStarted, RunResumed, VerificationRecorded

from .crashes import resume_once_lease_expired
from .verifier_crash_script import FUNCTIONS

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_a_killed_llm_judge_verifier_reuses_its_recorded_result(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    process = await anyio.run_process(
        [sys.executable, "-m", "tests.runtime.verifier_crash_script", str(db), "r"],
        cwd=ROOT,
        check=False,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()

    silent = ScriptedProvider([], name="critic")  # any call would be "script exhausted"
    async with Runtime(db, functions=FUNCTIONS, providers={"critic": silent}) as rt:
        before = [e.body for e in await rt.read_events("r")]
        assert not any(isinstance(b, NodeCompleted) and b.node_id == "check" for b in before)
        result = await (await resume_once_lease_expired(rt, "r")).result()
        events = [e.body for e in await rt.read_events("r")]
        assert rt.store is not None and (await rt.store.verify("r")).ok

    assert silent.calls == 0
    assert result.status == "completed" and result.path == ["write", "check", "publish"]
    assert result.memory["check_verification"]["score"] == 0.95
    assert result.memory["published"].startswith("The kettle")
    assert sum(isinstance(b, VerificationRecorded) for b in events) == 1
    resumed = next(i for i, b in enumerate(events) if isinstance(b, RunResumed))
    reruns = [b for b in events[resumed:] if isinstance(b, NodeStarted)]
    assert [b.node_id for b in reruns] == ["check", "publish"]
