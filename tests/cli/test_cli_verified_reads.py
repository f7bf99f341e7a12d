"""Reads that verify: show, state, timeline and export report a broken hash chain and
exit 1; fork refuses a prefix that does not verify; the docs' standalone script checks an
export. Each edit is made to the real SQLite file, as someone with the file could."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from .conftest import ALLOW, Workdir, ok

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "run",
    "graph.yaml",
    "--input",
    "text=refund please",
    "--provider",
    "scripted:script.yaml",
    "-q",
    "--output",
    "json",
]


def _completed(workdir: Workdir) -> str:
    run_id: str = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]
    ok(workdir.run("approve", run_id, *ALLOW, "--input", "approved_by=ops", "-q", "--by", "ann"))
    return run_id


def _edit(workdir: Workdir, run_id: str, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) in the stored bodies of ``run_id``."""
    assert len(old) == len(new)
    db = sqlite3.connect(workdir.path / "magistrate.db")
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        rows = db.execute("SELECT position, body FROM events WHERE run = ?", (key,)).fetchall()
        edited = [(bytes(body).replace(old, new), pos) for pos, body in rows if old in body]
        assert edited, f"{old!r} is in no stored body"
        db.executemany("UPDATE events SET body = ? WHERE position = ?", edited)
    db.close()


def _cut_last_row(workdir: Workdir, run_id: str) -> None:
    """Delete the run's last events row (a row may hold several events)."""
    db = sqlite3.connect(workdir.path / "magistrate.db")
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        db.execute(
            "DELETE FROM events WHERE position = (SELECT max(position) FROM events WHERE run = ?)",
            (key,),
        )
    db.close()


def test_state_of_a_cut_log_exits_1_naming_the_missing_events(workdir: Workdir) -> None:
    run_id = _completed(workdir)
    state = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)
    assert state["status"] == "completed"
    _cut_last_row(workdir, run_id)
    cut = ok(workdir.run("state", run_id), 1)
    assert cut.out == ""  # a state folded from a cut log is not the run's: nothing shown
    found = re.search(
        r"hash chain broken at seq (\d+): events missing: the log ends at seq (\d+) but "
        r"the run's record says (\d+)",
        cut.err,
    )
    assert found is not None, cut.err
    broken, end, record = map(int, found.groups())
    assert broken == end + 1 and end < record == state["last_seq"]
    assert ok(workdir.run("state", run_id, "--output", "json"), 1).out == ""


def test_show_state_timeline_and_export_of_an_edited_run_report_the_broken_chain(
    workdir: Workdir,
) -> None:
    run_id = _completed(workdir)
    shown = ok(workdir.run("show", run_id))
    assert "chain:     verified" in shown.out
    exported = ok(workdir.run("export", run_id)).out

    _edit(workdir, run_id, b"refund please", b"refund pleasX")

    show = ok(workdir.run("show", run_id), 1)
    assert "chain:     BROKEN at seq 1" in show.out
    assert "hash chain broken at seq 1" in show.err
    data = json.loads(ok(workdir.run("show", run_id, "--output", "json"), 1).out)
    assert data["chain"]["ok"] is False and data["chain"]["broken_at"] == 1
    state = ok(workdir.run("state", run_id), 1)
    assert "pleasX" not in state.out and "hash chain broken at seq 1" in state.err
    assert "verify: FAILED at seq 1" in ok(workdir.run("timeline", run_id), 1).out
    # export writes what the log holds, the forged value included, and says it is broken.
    export = ok(workdir.run("export", run_id), 1)
    assert len(export.out.split("\n")) == len(exported.split("\n"))
    assert "refund pleasX" in export.out
    assert "hash chain broken at seq 1" in export.err


def test_fork_of_an_edited_run_is_refused_and_writes_nothing(workdir: Workdir) -> None:
    run_id = _completed(workdir)
    _edit(workdir, run_id, b"refund please", b"refund pleasX")
    before = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    refused = ok(workdir.run("fork", run_id, *ALLOW, "--at", "3", "-q"), 1)
    assert "corrupt log" in refused.err and "seq 1" in refused.err
    after = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    assert after == before


def test_a_fork_of_an_intact_run_says_it_is_a_fork(workdir: Workdir) -> None:
    run_id = _completed(workdir)
    args = ("--provider", "scripted:script.yaml", "--output", "json")
    fork = json.loads(ok(workdir.run("fork", run_id, *ALLOW, "--at", "2", *args), 3).out)
    shown = ok(workdir.run("show", fork["run_id"])).out
    assert f"forked:    from run {run_id} at seq 2" in shown
    data = json.loads(ok(workdir.run("show", fork["run_id"], "--output", "json")).out)
    assert data["forked_from"]["run_id"] == run_id and data["forked_from"]["seq"] == 2
    listed = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    assert [(r["run_id"], r["origin"]) for r in listed] == [
        (fork["run_id"], run_id),
        (run_id, None),
    ]
    header, first, second = ok(workdir.run("runs")).out.splitlines()
    assert header.split()[-2:] == ["fork", "of"]
    assert first.split()[-1] == run_id and second.split()[-1] == "-"


def _verify_script(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / "verify_export.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_docs_script_verifies_an_export_and_rejects_an_edited_one(workdir: Workdir) -> None:
    run_id = _completed(workdir)
    text = ok(workdir.run("export", run_id)).out
    lines = [line for line in text.split("\n") if line]
    (workdir.path / "run.jsonl").write_text(text, encoding="utf-8")
    checked = _verify_script(workdir.path / "run.jsonl")
    assert (checked.returncode, checked.stdout) == (0, f"ok: {len(lines)} events\n")

    record = json.loads(lines[0])
    record["body"]["input"]["text"] = "refund pleasX"
    forged = [json.dumps(record, ensure_ascii=False), *lines[1:]]
    (workdir.path / "forged.jsonl").write_text("\n".join(forged), encoding="utf-8")
    rejected = _verify_script(workdir.path / "forged.jsonl")
    assert rejected.returncode == 1
    assert "seq 1: the hash does not match the event" in rejected.stdout

    dropped = [lines[0], *lines[2:]]
    (workdir.path / "dropped.jsonl").write_text("\n".join(dropped), encoding="utf-8")
    assert "expected seq 2" in _verify_script(workdir.path / "dropped.jsonl").stdout
