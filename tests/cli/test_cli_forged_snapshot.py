"""The CLI's ``state`` ignores a snapshot row edited in the store file, and ``verify``
reports it (in a subprocess, on a real SQLite file)."""

from __future__ import annotations

import json

import anyio

from tests.runtime.test_forged_snapshots import execute, forged, paused_payment

from .conftest import Workdir, ok


def test_state_ignores_an_edited_snapshot_and_verify_reports_it(workdir: Workdir) -> None:
    store = str(workdir.path / "runs.db")
    run_id, snapshot = anyio.run(paused_payment, store)
    assert "ok: 1 run, " in ok(workdir.run("verify", run_id, "--store", store)).out
    execute(
        store, "UPDATE snapshots SET data = ? WHERE seq = ?", (forged(snapshot.data), snapshot.seq)
    )
    state = json.loads(ok(workdir.run("state", run_id, "--store", store, "--output", "json")).out)
    assert state["memory"]["amount"] == 100
    text = ok(workdir.run("verify", run_id, "--store", store), 1).out
    assert f"FAILED {run_id} at seq {snapshot.seq}: the snapshot at seq {snapshot.seq}" in text
    assert "not bound to the log" in text
    report = json.loads(
        ok(workdir.run("verify", "--all", "--store", store, "--output", "json"), 1).out
    )
    assert report["ok"] is False and [p["seq"] for p in report["problems"]] == [snapshot.seq]
