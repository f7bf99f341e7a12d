"""Crash and resume of an LLM node: recorded turns are never sent to the model again."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import RunOwnedError
from runtime._runtime import Runtime
from runtime.events import LlmTurn, RunResumed, ToolResult
from runtime.providers._scripted import ScriptedProvider

from .llm_resume_script import ALLOW, GRAPH, KILL_AFTER_TURN, SCRIPT, TOOLS

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_a_killed_llm_node_resumes_from_the_log_without_resending_turns(
    tmp_path: Path,
) -> None:
    db = tmp_path / "crash.db"
    run_id = "crashed-run"
    process = await anyio.run_process(
        [sys.executable, "-m", "tests.runtime.llm_resume_script", str(db), run_id],
        cwd=ROOT,
        check=False,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()

    async with Runtime(db) as rt:
        before = [e.body for e in await rt.read_events(run_id)]
    assert [t.iteration for t in before if isinstance(t, LlmTurn)] == [1, 2, 3]
    assert {r.call_id for r in before if isinstance(r, ToolResult)} == {"r1", "r2"}

    remaining = ScriptedProvider(SCRIPT[KILL_AFTER_TURN:])
    async with Runtime(db, provider=remaining, tools=TOOLS, allow_imports=[ALLOW]) as rt:
        while True:
            try:
                handle = await rt.resume(run_id)
                break
            except RunOwnedError:  # the killed process's lease has not expired yet
                await anyio.sleep(0.05)
        result = await handle.result()
        events = [e.body for e in await rt.read_events(run_id)]
        assert rt.store is not None
        assert (await rt.store.verify(run_id)).ok

    # Exactly the two missing turns were asked for; turn 3 was not asked again.
    assert remaining.calls == 2
    assert [t.iteration for t in events if isinstance(t, LlmTurn)] == [1, 2, 3, 4, 5]
    # Turn 3's missing calls ran once, after the resume, before the next model call.
    resumed_at = next(i for i, e in enumerate(events) if isinstance(e, RunResumed))
    results = [(i, r.call_id) for i, r in enumerate(events) if isinstance(r, ToolResult)]
    assert [c for _, c in results] == ["r1", "r2", "r3", "r4", "r5"]
    assert all(i > resumed_at for i, c in results if c in ("r3", "r4"))
    first = remaining.requests[0]
    assert [m.tool_call_id for m in first.messages[-2:]] == ["r3", "r4"]
    assert [m.content for m in first.messages if m.role == "assistant"] == [
        "Checking Lisbon to Porto.",
        "Checking Porto to Faro.",
        "One more leg, and a draft.",
    ]

    # The same graph, uninterrupted, ends in the same place and sent the same requests.
    reference = ScriptedProvider(SCRIPT)
    reference_runtime = Runtime(
        tmp_path / "reference.db", provider=reference, tools=TOOLS, allow_imports=[ALLOW]
    )
    async with reference_runtime as rt:
        expected = await (await rt.start(GRAPH)).result()
    assert result.status == expected.status == "completed"
    assert result.memory == expected.memory
    assert result.memory["summary"] == "PLAN: Lisbon > Porto > Faro (863 km)"
    assert result.path == expected.path == ["route", "finish"]
    assert _plain(remaining.requests) == _plain(reference.requests[KILL_AFTER_TURN:])


def _plain(requests: list[Any]) -> list[Any]:
    return [(r.system, r.messages, r.tools) for r in requests]
