"""``magistrate replay`` end to end in a subprocess: one run (text and JSON), a changed
graph file, many runs with the runs filters, exit codes (0 equal, 1 diverged, 2 bad input
or a log that fails verification)."""

from __future__ import annotations

import json
import sqlite3

from .conftest import ALLOW, GRAPH, Workdir, ok
from .test_cli_audit import RUN


def _recorded(workdir: Workdir) -> tuple[str, str]:
    """A run left paused at its gate, and one approved to completion."""
    paused = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]
    done = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]
    ok(workdir.run("approve", done, *ALLOW, "--input", "approved_by=ops", "-q"))
    return paused, done


def _changed(workdir: Workdir) -> None:
    """The graph without its success criterion: the judge's RETRY turns into an ACCEPT."""
    text = GRAPH.replace("    success_criteria: [category is billing or technical]\n", "")
    assert text != GRAPH
    workdir.write("changed.yaml", text)


def test_a_run_replays_equal_against_its_own_graph(workdir: Workdir) -> None:
    paused, done = _recorded(workdir)
    for run_id in (paused, done):
        text = ok(workdir.run("replay", run_id)).out
        assert text.startswith(f"run {run_id}: replays equal against graph triage")
        # The graph file given on the command line: its functions are never imported.
        report = json.loads(
            ok(workdir.run("replay", run_id, "--graph", "graph.yaml", "--output", "json")).out
        )
        assert report["equal"] is True and report["divergences"] == []
        assert report["stopped"] is None and report["model_calls"] >= 4


def test_a_changed_graph_diverges_with_exit_1(workdir: Workdir) -> None:
    _, done = _recorded(workdir)
    _changed(workdir)
    result = ok(workdir.run("replay", done, "--graph", "changed.yaml", "--output", "json"), 1)
    report = json.loads(result.out)
    first = report["divergences"][0]
    assert report["equal"] is False and first["kind"] == "judge.verdict"
    assert first["reason"] == "verdict ACCEPT at level 0 where RETRY was recorded"
    assert first["recorded"]["action"] == "retry" and first["now"]["action"] == "accept"
    events = json.loads(ok(workdir.run("export", done)).out.splitlines()[first["seq"] - 1])
    assert events["seq"] == first["seq"] and events["type"] == "judge.verdict"
    text = ok(workdir.run("replay", done, "--graph", "changed.yaml"), 1).out
    assert f"seq {first['seq']} [judge.verdict] verdict ACCEPT at level 0" in text


def test_many_runs_print_a_summary(workdir: Workdir) -> None:
    paused, done = _recorded(workdir)
    _changed(workdir)
    args = ("replay", "--graph", "changed.yaml", "--output", "json")
    summary = json.loads(ok(workdir.run(*args, "--status", "completed"), 1).out)
    assert (summary["replayed"], summary["equal"], summary["diverged"]) == (1, 0, 1)
    assert summary["by_kind"] == {"judge.verdict": 1}
    assert [r["run_id"] for r in summary["reports"]] == [done]
    same = json.loads(ok(workdir.run("replay", "--graph", "graph.yaml", "--output", "json")).out)
    assert (same["replayed"], same["equal"]) == (2, 2)
    text = ok(workdir.run("replay", "--graph", "changed.yaml"), 1).out
    assert "runs replayed: 2, equal: 0, diverged: 2" in text
    assert f"{done}  seq " in text and f"{paused}  seq " in text


def test_bad_input_and_an_edited_log_exit_2(workdir: Workdir) -> None:
    _, done = _recorded(workdir)
    assert "replay takes a RUN" in ok(workdir.run("replay"), 2).err
    assert "no run with id 'ghost'" in ok(workdir.run("replay", "ghost"), 2).err
    db = sqlite3.connect(workdir.path / "magistrate.db")
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (done,)).fetchone()
        db.execute(
            "UPDATE events SET hash = zeroblob(length(hash)) WHERE run = ? AND seq = 3", (key,)
        )
    db.close()
    err = ok(workdir.run("replay", done), 2).err
    assert f"run {done} fails verification" in err and "hash mismatch" in err


def test_rejudge_asks_the_judge_again_with_the_provider_given(workdir: Workdir) -> None:
    _, done = _recorded(workdir)
    workdir.write("judge.yaml", 'turns: []\njudge:\n  - \'{"verdict": "ACCEPT"}\'\n')
    args = ("replay", done, "--rejudge", "--provider", "scripted:judge.yaml", "--output", "json")
    report = json.loads(ok(workdir.run(*args), 1).out)
    assert report["live_calls"] == 1
    first = report["divergences"][0]
    assert first["reason"] == "verdict ACCEPT at level 2 where RETRY was recorded"
    assert any("cost tokens" in w for w in report["warnings"])
    refused = ok(workdir.run("replay", done, "--provider", "scripted:judge.yaml"), 2)
    assert "--provider is for --rejudge" in refused.err
