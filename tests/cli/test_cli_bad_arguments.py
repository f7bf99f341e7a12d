"""Bad input on the command line exits 2 with one error line, no traceback, before anything is
written: numbers past what a store takes, run ids no front can name, input values the log
cannot store; a resume of a finished run exits 4, as the other controls do."""

from __future__ import annotations

import json

from .conftest import ALLOW, Workdir, ok
from .test_cli_audit import RUN, _paused_and_completed

HUGE = "100000000000000000000"  # past a 64-bit integer


def _usage(workdir: Workdir, *args: str, says: str) -> None:
    result = ok(workdir.run(*args), 2)
    assert says in result.err, result.err
    # One error line (argparse shows the usage above its own), no traceback.
    assert "Traceback" not in result.err and "--debug" not in result.err
    assert says in result.err.strip().splitlines()[-1], result.err


def test_bad_arguments_exit_2_and_write_nothing(workdir: Workdir) -> None:
    paused, done = _paused_and_completed(workdir)
    _usage(workdir, "runs", "--limit", HUGE, says="--limit")
    _usage(workdir, "runs", "--limit", "0", says="--limit")
    _usage(workdir, "state", paused, "--at", HUGE, says="--at")
    _usage(workdir, "fork", paused, "--at", "0", *ALLOW, says="--at")
    _usage(workdir, "replay", "--graph", "graph.yaml", "--limit", HUGE, says="--limit")
    for lease, poll in (("nan", "1"), ("inf", "1"), ("5", "nan")):
        _usage(workdir, "worker", "--lease", lease, "--poll", poll, says="finite and positive")
    for bad in ("", "a/b", "..", "   "):
        _usage(workdir, "submit", "graph.yaml", "--run-id", bad, says="--run-id")
    (workdir.path / "kept.txt").write_text(f"{done} {HUGE} abc\n")
    _usage(workdir, "verify", "--all", "--against", "kept.txt", says="kept.txt")
    before = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    nan = ["text=NaN" if arg == "text=refund please" else arg for arg in RUN]
    _usage(workdir, *nan, says="text")
    after = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    assert after == before  # nothing was started


def test_a_resume_of_a_finished_run_exits_4_like_the_other_controls(workdir: Workdir) -> None:
    _paused, done = _paused_and_completed(workdir)
    resumed = ok(workdir.run("resume", done, *ALLOW), 4)
    assert "already completed" in resumed.err
    cancelled = ok(workdir.run("cancel", done), 4)
    assert "already completed" in cancelled.err
