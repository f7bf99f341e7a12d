"""An approval this process may not execute (the stored graph needs an import the command
line does not allow) is recorded, and the run is left to a process that may: a worker
allowed the import runs it through the approved gate (issues 26 and 28)."""

from __future__ import annotations

import json
import signal
import time

from .conftest import ALLOW, Workdir, lines, ok

RUN = ["run", "graph.yaml", "--input", "text=invoice", "--provider", "scripted:script.yaml"]


def _show(workdir: Workdir, run_id: str) -> dict[str, object]:
    shown: dict[str, object] = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    return shown


def test_an_approval_that_cannot_run_here_is_recorded_and_a_worker_allowed_to_runs_it(
    workdir: Workdir,
) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    # No --allow-imports: the graph from the store imports nothing here. The approval is
    # recorded (exit 0, one approval.granted event, the last one), nothing is run here,
    # and the output says who goes on with it.
    recorded = ok(workdir.run("approve", run_id, "--by", "ops", "--input", "approved_by=ops"), 0)
    # In short: what it needs that may not be imported here, and the command that runs it
    # here; the spec's every problem only under --debug.
    assert recorded.out.splitlines() == [
        f"run {run_id}: decision by ops recorded; not executed here; its owner or a worker "
        "(magistrate worker) continues it",
        "  it needs triage_funcs:load, triage_funcs:lookup, triage_funcs:act, and importing "
        "from module 'triage_funcs' is not allowed here (allowed: none); to run it here: "
        f"magistrate resume {run_id} --allow-imports triage_funcs",
    ]
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    granted = [e for e in events if e["type"] == "approval.granted"]
    assert [e["body"]["by"] for e in granted] == ["ops"]
    assert events[-1]["type"] == "approval.granted"
    shown = _show(workdir, run_id)
    assert (shown["status"], shown["owner"]) == ("running", None)  # left, claimed by none
    # Approving again is refused: the gate is no longer waiting.
    again = ok(workdir.run("approve", run_id, "--by", "eve", "--input", "approved_by=eve"), 2)
    assert "it waits at no gate" in again.err
    # ... and says how it goes on: nothing executes it, a resume allowed its imports does.
    assert again.err.splitlines()[1].strip() == (
        f"nothing executes it now: magistrate resume {run_id} --allow-imports triage_funcs "
        "continues it here (or a magistrate worker that may run it)"
    )
    assert len(lines(ok(workdir.run("export", run_id)).out)) == len(events)
    # --debug lists every problem of the graph spec, on stderr.
    other = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    debug = ok(workdir.run("--debug", "approve", other, "--input", "approved_by=ops"))
    assert "  - nodes[1].tools[0]: 'triage_funcs:lookup' is not a registered tool" in debug.err
    # A worker that may import the graph's module takes the run up where it was left.
    worker = workdir.popen("worker", *ALLOW, "--provider", "scripted:script.yaml")
    try:
        deadline = time.monotonic() + 40
        while _show(workdir, run_id)["status"] == "running":
            assert time.monotonic() < deadline, "the worker did not finish the approved run"
            assert worker.poll() is None, worker.communicate()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    done = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)
    assert done["status"] == "completed"
    assert done["memory"]["reply"] == "[billing] approved by ops"
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    assert [e["type"] for e in events].count("approval.granted") == 1
    assert [e["type"] for e in events].count("run.started") == 1
