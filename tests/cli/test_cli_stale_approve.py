"""``approve --expected-seq``: a decision made on what was seen (``show``, ``state``) is
refused, exit 4 with nothing recorded, when the run's log moved on since."""

from __future__ import annotations

import json

from .conftest import ALLOW, Workdir, ok

RUN = ["run", "graph.yaml", "--input", "text=refund please", "--provider", "scripted:script.yaml"]


def test_approve_refuses_a_run_that_moved_on_since_the_seq_seen(workdir: Workdir) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    seen = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)["last_seq"]
    for decision in (["--input", "approved_by=ops"], ["--reject", "no"]):
        stale = workdir.run("approve", run_id, *ALLOW, *decision, "--expected-seq", str(seen - 1))
        ok(stale, 4)
        assert f"its log moved on since seq {seen - 1} (it is at seq {seen} now)" in stale.err
    bad = ok(workdir.run("approve", run_id, *ALLOW, "--expected-seq", "0"), 2)
    assert "--expected-seq" in bad.err
    now = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)
    assert now["last_seq"] == seen and now["status"] == "paused"  # nothing recorded
    done = workdir.run(
        "approve", run_id, *ALLOW, "--input", "approved_by=ops", "--expected-seq", str(seen)
    )
    ok(done, 0)
