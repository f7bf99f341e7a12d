"""A heads file moved away while a ``magistrate worker`` writes it: the worker goes on in
the file at the path (a new one, or one another process made there), its lines linked on
from that file's last, and says so once each time."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from eventstore import read_heads_file

from .conftest import Workdir, ok

QUICK = """
id: quick
entry_node: a
nodes:
  - {id: a, function: "triage_funcs:noted", output_keys: [noted]}
"""

WARNING = "heads file magistrate.db.heads was moved, replaced or deleted while this process"


def _submit(workdir: Workdir, *more: str) -> str:
    run_id: str = json.loads(
        ok(workdir.run("submit", "quick.yaml", *more, "--output", "json")).out
    )["run_id"]
    return run_id


def _recorded_at_its_end(workdir: Workdir, heads: Path, run_id: str) -> int:
    """Wait until the run completed and ``heads`` holds its head at its last event; that
    seq."""
    deadline = time.monotonic() + 30
    while True:
        shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
        head = read_heads_file(heads).newest().get(run_id)
        if shown["status"] == "completed" and head is not None and head.seq == shown["events"]:
            return head.seq
        assert time.monotonic() < deadline, (shown["status"], head)
        time.sleep(0.05)


def test_a_worker_records_heads_in_the_file_at_the_path_after_it_moved(
    workdir: Workdir,
) -> None:
    workdir.write("quick.yaml", QUICK)
    heads = workdir.path / "magistrate.db.heads"
    first = _submit(workdir)
    worker = workdir.popen("worker", "--allow-imports", "triage_funcs")
    try:
        _recorded_at_its_end(workdir, heads, first)
        # Moved away (rotated): the worker's next heads go to a new file at the path.
        heads.rename(workdir.path / "magistrate.db.heads.1")
        second = _submit(workdir, "--heads", "none")
        second_seq = _recorded_at_its_end(workdir, heads, second)
        # Moved away again, and a new file made there by another process (this submit).
        heads.rename(workdir.path / "magistrate.db.heads.2")
        third = _submit(workdir)
        third_seq = _recorded_at_its_end(workdir, heads, third)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        _, log = worker.communicate()
    assert log.count(WARNING) == 2, log
    kept = read_heads_file(heads)
    assert kept.ok, kept.reason
    assert {run: head.seq for run, head in kept.newest().items()} == {third: third_seq}
    # The submit's line first, the worker's linked on from it.
    assert len(kept.heads) >= 2 and {h.run_id for h in kept.heads} == {third}
    assert kept.heads[0].seq < third_seq
    rotated = read_heads_file(workdir.path / "magistrate.db.heads.2")
    assert rotated.ok and {r: h.seq for r, h in rotated.newest().items()} == {second: second_seq}
    assert first in read_heads_file(workdir.path / "magistrate.db.heads.1").newest()
    # Each file checks against the store: the one at the path and the rotated ones.
    for name in ("magistrate.db.heads", "magistrate.db.heads.1", "magistrate.db.heads.2"):
        report = json.loads(
            ok(workdir.run("verify", "--all", "--heads", name, "--output", "json")).out
        )
        assert report["ok"] and report["recorded_heads"] >= 1, (name, report)
    ok(workdir.run("verify", "--all"))
