"""A run live in one process obeys a cancel appended to its log by another process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from runtime import Runtime
from runtime.events import NodeStarted, RunCancelled

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def spawn(db: str, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.cancel_target", db, run_id],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_live_run_stops_when_another_process_cancels_it(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    process = await anyio.to_thread.run_sync(spawn, db, "r1")
    try:
        assert process.stdout is not None
        line = await anyio.to_thread.run_sync(process.stdout.readline)
        assert line.strip() == "started", process.stderr.read() if process.stderr else ""
        # Process B: this one. The run is not live here, so cancel appends to its log.
        async with Runtime(db) as rt:
            await rt.cancel("r1", reason="from another process")
        out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=30))
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1] == "status cancelled", (out, err)
    async with Runtime(db) as rt:
        events = await rt.read_events("r1")
        state = await rt.get_state("r1")
        assert rt.store is not None
        report = await rt.store.verify("r1")
    assert report.ok, report
    assert state.status == "cancelled" and state.error == "from another process"
    cancels = [i for i, e in enumerate(events) if isinstance(e.body, RunCancelled)]
    assert len(cancels) == 1
    # Process A wrote nothing after the cancel: it stopped at its next step.
    assert cancels[0] == len(events) - 1
    starts = [e for e in events if isinstance(e.body, NodeStarted)]
    assert 3 <= len(starts) < 2_000


async def test_a_cancel_from_another_process_keeps_the_running_nodes_partial_outputs(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")

    def spawn_progress() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.progress_target", db, "p1"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    process = await anyio.to_thread.run_sync(spawn_progress)
    try:
        assert process.stdout is not None
        line = await anyio.to_thread.run_sync(process.stdout.readline)
        assert line.strip() == "started", process.stderr.read() if process.stderr else ""
        async with Runtime(db) as rt:
            await rt.cancel("p1", reason="from another process")
        out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=30))
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1] == "status cancelled", (out, err)
    async with Runtime(db) as rt:
        state = await rt.get_state("p1")
    # As an in-process cancel does: the node's partial outputs are flushed into memory.
    assert state.status == "cancelled" and state.memory == {"progress": 4}
    assert state.pending == ["work"]
