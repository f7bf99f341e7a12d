"""The heads file and the store file at their edges, through ``magistrate``: a heads file
that is a directory, a damaged store file under ``verify``, a store reached through a
symbolic link, and a store file deleted while its heads file stays."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from eventstore import heads_path_beside

from .conftest import ALLOW, Workdir, lines, ok

RUN = ["run", "graph.yaml", "--input", "text=refund please", "--provider", "scripted:script.yaml"]
PAUSED = [*RUN, "-q", "--output", "json"]


def _paused(workdir: Workdir, *store: str) -> str:
    run_id: str = json.loads(ok(workdir.run(*PAUSED, *store), 3).out)["run_id"]
    return run_id


def test_a_heads_file_that_is_a_directory_is_said_in_one_line(workdir: Workdir) -> None:
    run_id = _paused(workdir)
    heads = workdir.path / "magistrate.db.heads"
    heads.unlink()
    heads.mkdir()
    warned = (
        "magistrate: warning: heads file magistrate.db.heads: it is a directory; the heads "
        "recorded for runs are not checked (move it away, or name a file with --heads)\n"
    )
    # The commands that show runs show them, saying that recorded heads are not checked.
    for command in (("show", run_id), ("timeline", run_id), ("state", run_id), ("runs",)):
        shown = ok(workdir.run(*command))
        assert shown.err == warned, command
        assert shown.out.strip(), command
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "paused" and shown["chain"]["ok"]
    # Those that do not read it are not bothered by it.
    assert ok(workdir.run("export", run_id)).err == ""
    assert ok(workdir.run("heads", "--all")).err == ""
    # verify checks it, and the commands that write runs record heads in it: refused.
    refused = (
        "magistrate: error: heads file magistrate.db.heads: it is a directory (move it "
        "away, name another file with --heads, or --heads none)\n"
    )
    for command in (
        ("verify", run_id),
        ("verify", "--all"),
        tuple(RUN),
        ("approve", run_id, *ALLOW, "--input", "approved_by=ops"),
        ("cancel", run_id),
    ):
        result = ok(workdir.run(*command), 2)
        assert result.err == refused, command
    assert ok(workdir.run("runs", "-q")).out == f"{run_id}\n"  # nothing was written
    assert ok(workdir.run("show", run_id, "--heads", "none", "--output", "json")).err == ""
    heads.rmdir()
    ok(workdir.run("verify", "--all"))


def _damage_runs_table(store: Path) -> None:
    """Garbage over the first page of the store's table of runs, past its page header."""
    with sqlite3.connect(store) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
        ).fetchone()[0]
    conn.close()
    with open(store, "r+b") as file:
        file.seek((root - 1) * page_size + 8)
        file.write(b"\xde\xad" * (page_size // 4))


def test_verify_fails_a_damaged_store_file_for_one_run_and_for_all(workdir: Workdir) -> None:
    run_id = _paused(workdir)
    _paused(workdir)
    store = workdir.path / "magistrate.db"
    good = store.read_bytes()
    for damage in ("cut short", "garbage"):
        store.write_bytes(good)
        if damage == "cut short":
            os.truncate(store, len(good) // 2)
        else:
            _damage_runs_table(store)
        for scope in ((run_id,), ("--all",)):
            failed = ok(workdir.run("verify", *scope, "--heads", "none"), 1)
            first, last = lines(failed.out)
            assert first.startswith("FAILED store magistrate.db: the file cannot be read: ")
            assert "restore it from a backup" in first, failed.out
            assert last == "1 problem: 0 runs, 0 events checked" and failed.err == ""
            report = json.loads(
                ok(workdir.run("verify", *scope, "--heads", "none", "--output", "json"), 1).out
            )
            assert not report["ok"] and report["runs"] == []
            assert [p["run_id"] for p in report["problems"]] == ["store magistrate.db"]
    store.write_bytes(good)
    ok(workdir.run("verify", "--all", "--heads", "none"))


def test_a_store_through_a_symbolic_link_keeps_one_heads_file(workdir: Workdir) -> None:
    real = workdir.path / "real"
    real.mkdir()
    (workdir.path / "linkdir").symlink_to("real")
    (workdir.path / "link.db").symlink_to("real/runs.db")
    # A new store through a directory's link, then runs through the file's and the real path.
    ids = [
        _paused(workdir, "--store", "linkdir/runs.db"),
        _paused(workdir, "--store", "link.db"),
        _paused(workdir, "--store", "real/runs.db"),
    ]
    assert sorted(p.name for p in real.iterdir()) == ["runs.db", "runs.db.heads"]
    assert not (workdir.path / "link.db.heads").exists()
    for store in ("real/runs.db", "link.db", "linkdir/runs.db"):
        report = json.loads(
            ok(workdir.run("verify", "--all", "--store", store, "--output", "json")).out
        )
        assert report["recorded_heads"] == 3, store
        assert Path(workdir.path, report["heads_file"]).samefile(real / "runs.db.heads")
        owners = json.loads(ok(workdir.run("runs", "--store", store, "--output", "json")).out)
        assert sorted(r["run_id"] for r in owners["runs"]) == sorted(ids)
        assert {r["ownership"] for r in owners["runs"]} == {"unclaimed"}, store
    # A new store through a link to a file not there yet.
    (workdir.path / "new.db").symlink_to("real/new.db")
    _paused(workdir, "--store", "new.db")
    report = json.loads(
        ok(workdir.run("verify", "--all", "--store", "real/new.db", "--output", "json")).out
    )
    assert report["recorded_heads"] == 1 and report["heads_file"] == "real/new.db.heads"
    # The public name of the file: one for every path to a store, as given without links.
    assert heads_path_beside("runs.db") == "runs.db.heads"
    beside = heads_path_beside(str(workdir.path / "link.db"))
    assert beside == str((real / "runs.db").resolve()) + ".heads"
    assert heads_path_beside(f"sqlite:///{workdir.path}/linkdir/runs.db") == beside


def test_a_store_deleted_beside_its_heads_file_is_said_to_be_gone(workdir: Workdir) -> None:
    _paused(workdir)
    (workdir.path / "magistrate.db").unlink()
    for command in (("verify", "--all"), ("runs",)):
        gone = ok(workdir.run(*command), 2)
        assert gone.err == (
            "magistrate: error: no store at magistrate.db, but its heads file "
            "magistrate.db.heads records runs: the store was moved or deleted (restore it, "
            "or name another with --store or MAGISTRATE_STORE)\n"
        )
    assert (
        "no store at elsewhere.db (name one"
        in ok(workdir.run("runs", "--store", "elsewhere.db"), 2).err
    )
