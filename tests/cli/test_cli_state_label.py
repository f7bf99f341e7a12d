"""``magistrate state`` names a started node that nothing executes as interrupted (the run
cancelled, paused or waiting for a worker), not as running; ``magistrate replay``, which
only reads runs, reads them beside a heads file that is a directory, as ``show`` does."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from .conftest import Workdir, lines, ok


def _state(workdir: Workdir, run_id: str, *more: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(
        ok(workdir.run("state", run_id, *more, "--output", "json")).out
    )
    return shown


def _started_lines(workdir: Workdir, run_id: str, *more: str) -> list[str]:
    """The text lines of ``state`` about started nodes, and the pause."""
    text = ok(workdir.run("state", run_id, *more)).out
    return [
        line for line in lines(text) if line.startswith(("running:", "interrupted:", "paused:"))
    ]


def test_state_says_a_node_nothing_executes_is_interrupted(workdir: Workdir) -> None:
    submitted = ok(workdir.run("submit", "slow.yaml", "--output", "json"))
    run_id: str = json.loads(submitted.out)["run_id"]
    worker = workdir.popen("worker", "--allow-imports", "triage_funcs")
    try:
        deadline = time.monotonic() + 30
        while "wait" not in _state(workdir, run_id)["running"]:
            assert time.monotonic() < deadline and worker.poll() is None, "the node never started"
            time.sleep(0.05)
        # While its worker executes it, the node is running.
        assert _started_lines(workdir, run_id) == ["running: wait"]
        # A worker stopped hands the run back (recording nothing): nothing executes it.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        worker.communicate()
    handed_back = _state(workdir, run_id)
    assert (handed_back["status"], handed_back["running"]) == ("running", {"wait": 1})
    assert _started_lines(workdir, run_id) == ["interrupted: wait (waiting for a worker)"]
    shown = lines(ok(workdir.run("show", run_id)).out)
    assert "owner:     (waiting for a worker)" in shown
    last = handed_back["last_seq"]
    # Paused (nobody owns it: paused at once), its node is the pause's.
    ok(workdir.run("pause", run_id))
    assert _started_lines(workdir, run_id) == ["paused: user before wait"]
    # Back before the pause, the state is as it was then: the run ran that node.
    assert _started_lines(workdir, run_id, "--at", str(last)) == ["running: wait"]
    ok(workdir.run("cancel", run_id))
    assert _started_lines(workdir, run_id) == ["interrupted: wait (the run was cancelled)"]
    cancelled = _state(workdir, run_id)
    # The JSON keeps the fold's field: what a resume runs again.
    assert (cancelled["status"], cancelled["running"]) == ("cancelled", {"wait": 1})


def test_state_of_a_run_cancelled_in_a_node_says_it_was_interrupted(workdir: Workdir) -> None:
    process = workdir.popen("run", "slow.yaml", "--output", "json")
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while "wait started" not in seen:
            assert time.monotonic() < deadline and process.poll() is None, seen
            seen += process.stderr.readline()
        run_id = ok(workdir.run("runs", "-q")).out.strip()
        ok(workdir.run("cancel", run_id))
        assert process.wait(timeout=30) == 4
    finally:
        if process.poll() is None:
            process.kill()
        out, _ = process.communicate()
    assert json.loads(out)["status"] == "cancelled"
    assert _started_lines(workdir, run_id) == ["interrupted: wait (the run was cancelled)"]
    at_cancel = _state(workdir, run_id)["last_seq"]
    assert _started_lines(workdir, run_id, "--at", str(at_cancel - 1)) == ["running: wait"]


def test_replay_reads_runs_beside_a_heads_file_that_is_a_directory(workdir: Workdir) -> None:
    run = ["run", "graph.yaml", "--input", "text=refund please"]
    paused = ok(workdir.run(*run, "--provider", "scripted:script.yaml", "--output", "json"), 3)
    run_id = json.loads(paused.out)["run_id"]
    heads = workdir.path / "magistrate.db.heads"
    heads.unlink()
    heads.mkdir()
    replayed = ok(workdir.run("replay", run_id))
    assert replayed.err == (
        "magistrate: warning: heads file magistrate.db.heads: it is a directory; the heads "
        "recorded for runs are not checked (move it away, or name a file with --heads)\n"
    )
    assert replayed.out.strip()
    many = json.loads(ok(workdir.run("replay", "--graph", "graph.yaml", "--output", "json")).out)
    assert (many["replayed"], many["equal"]) == (1, 1)
    assert heads.is_dir() and not any(heads.iterdir())
