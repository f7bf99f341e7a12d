"""``magistrate run`` and ``magistrate worker`` exit soon after their run is recorded, even
when an ``async def`` node catches its cancellation and carries on: the task is left
behind, with one warning naming it. (The subprocess timeouts only catch a process that
waits for the node's two minutes.)"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import Any

from .conftest import Workdir, ok

SWALLOWS = """
import asyncio
import pathlib
import time


async def hold(inputs):
    # Says that it runs, then holds for two minutes whatever cancels it.
    pathlib.Path("hold.started").write_text("")
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
    return {"done": True}
"""

TIMED = """
id: timed
entry_node: h
nodes:
  - {id: h, function: "swallow_funcs:hold", timeout: 0.5, retry: {max_attempts: 1},
     output_keys: [done]}
"""

UNTIMED = """
id: untimed
entry_node: h
nodes:
  - {id: h, function: "swallow_funcs:hold", output_keys: [done]}
"""

#: Far less than the node's hold: a process still waiting for it fails the test.
GUARD = 30.0

WARNING = "magistrate: warning: 1 task ignored its cancellation"


def _workdir(workdir: Workdir) -> Workdir:
    workdir.write("swallow_funcs.py", SWALLOWS)
    workdir.write("timed.yaml", TIMED)
    workdir.write("untimed.yaml", UNTIMED)
    return workdir


def _shown(workdir: Workdir, run_id: str) -> dict[str, Any]:
    shown = ok(workdir.run("show", run_id, "--store", "runs.db", "--output", "json"))
    data: dict[str, Any] = json.loads(shown.out)
    return data


def _only_run(workdir: Workdir) -> str:
    listed = ok(workdir.run("runs", "--store", "runs.db", "--output", "json"))
    (run,) = json.loads(listed.out)["runs"]
    run_id: str = run["run_id"]
    return run_id


def _started(workdir: Workdir, process: subprocess.Popen[str]) -> None:
    """Wait until the node runs (it leaves a file), or the process has ended."""
    marker = workdir.path / "hold.started"
    give_up = time.monotonic() + GUARD
    while not marker.exists() and process.poll() is None and time.monotonic() < give_up:
        time.sleep(0.05)
    assert marker.exists(), "the node never started"


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM the process; its exit code and stderr once it exits (within GUARD)."""
    try:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=GUARD)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, err


def test_run_exits_once_its_timed_out_node_is_abandoned(workdir: Workdir) -> None:
    _workdir(workdir)
    done = ok(workdir.run("run", "timed.yaml", "--store", "runs.db", "-q", timeout=GUARD), 1)
    assert "NodeTimeoutError: node 'h' did not finish within 0.5 s" in done.out
    assert WARNING in done.err
    assert "swallow_funcs.hold at " in done.err
    assert "Task was destroyed" not in done.err
    run_id = _only_run(workdir)
    shown = _shown(workdir, run_id)
    assert (shown["status"], shown["owner"]) == ("failed", None)


def test_run_interrupted_by_sigterm_exits_without_waiting_for_the_node(
    workdir: Workdir,
) -> None:
    _workdir(workdir)
    process = workdir.popen("run", "untimed.yaml", "--store", "runs.db", "-q")
    _started(workdir, process)
    code, err = _stop(process)
    assert code == 4, err  # cancelled, as ever
    assert WARNING in err and "swallow_funcs.hold at " in err
    assert "Task was destroyed" not in err
    shown = _shown(workdir, _only_run(workdir))
    assert (shown["status"], shown["owner"]) == ("cancelled", None)


def test_worker_stopped_by_sigterm_exits_without_waiting_for_the_node(
    workdir: Workdir,
) -> None:
    _workdir(workdir)
    ok(workdir.run("submit", "untimed.yaml", "--store", "runs.db"))
    process = workdir.popen("worker", "--store", "runs.db", "--allow-imports", "swallow_funcs")
    _started(workdir, process)
    code, err = _stop(process)
    assert code == 0, err
    assert WARNING in err and "swallow_funcs.hold at " in err
    assert "Task was destroyed" not in err
    # Handed back: still running, its claim released for another worker.
    shown = _shown(workdir, _only_run(workdir))
    assert (shown["status"], shown["owner"], shown["ownership"]) == ("running", None, "waiting")
