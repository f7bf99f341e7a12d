"""``magistrate run`` / ``approve`` / ``resume`` / ``fork`` / ``cancel`` end to end, each in a
subprocess on a real SQLite store."""

from __future__ import annotations

import json
import signal
import time

import pytest

from .conftest import ALLOW, MAGISTRATE, Workdir, lines, ok

RUN = [
    "run",
    "graph.yaml",
    "--input",
    "text=  my invoice is wrong ",
    "--provider",
    "scripted:script.yaml",
]


def test_the_console_script_is_installed() -> None:
    assert MAGISTRATE.exists(), "pip install -e . installs the magistrate entry point"


def test_run_pauses_then_approve_from_a_second_process_completes_it(workdir: Workdir) -> None:
    first = ok(workdir.run(*RUN), 3)
    # Progress on stderr: nodes, turns, the verdicts with their feedback.
    assert "classify started" in first.err
    assert "RETRY [Level 2 quality] confidence 0.70: category must be billing or technical" in (
        first.err
    )
    assert "ACCEPT [Level 2 quality]" in first.err
    assert "turn 1: calls lookup" in first.err
    assert "paused (hitl) before act" in first.err
    # The result on stdout: status, memory, how to go on.
    assert ": paused after 2 steps" in first.out
    assert "  category: billing" in first.out
    run_id = first.out.split()[1].rstrip(":")
    # The run is named before its first progress line.
    assert first.err.splitlines()[0] == f"run {run_id} (store magistrate.db)"
    # How to go on, whole: the graph comes back from the store, which imports only what
    # --allow-imports names (without it, the approval is recorded and nothing runs).
    assert (
        f"continue with: magistrate approve {run_id} [--input KEY=VALUE] "
        "--allow-imports triage_funcs\n"
    ) in first.out
    assert (workdir.path / "magistrate.db").exists()  # the default store, in the cwd

    approved = ok(
        workdir.run("approve", run_id, *ALLOW, "--input", "approved_by=ops", "--output", "json")
    )
    result = json.loads(approved.out)
    assert result["status"] == "completed" and result["quality"] == "clean"
    assert result["memory"]["reply"] == "[billing] approved by ops"
    assert result["path"] == ["load", "classify", "act"]
    # A second approval is refused with what happened: exit 4, the run already completed.
    again = ok(workdir.run("approve", run_id), 4)
    assert again.err.strip() == (
        f"magistrate: error: run {run_id} is completed: already completed: it waits at no gate"
    )


def test_run_json_output_is_one_document_and_progress_can_be_silenced(workdir: Workdir) -> None:
    done = ok(workdir.run(*RUN, "--output", "json", "--quiet"), 3)
    data = json.loads(done.out)
    assert data["status"] == "paused" and data["resume_at"] == ["act"]
    assert data["memory"]["ticket"] == "my invoice is wrong"
    assert done.err == ""


def test_inputs_come_from_files_and_pairs_and_values_parse_as_json(workdir: Workdir) -> None:
    workdir.write("in.json", json.dumps({"text": "from the file", "n": 1}))
    done = ok(
        workdir.run(
            *RUN[:2],
            "--input-file",
            "in.json",
            "--input",
            "n=[1, 2]",
            "--input",
            "flag=true",
            "--provider",
            "scripted:script.yaml",
            "--output",
            "json",
            "-q",
        ),
        3,
    )
    memory = json.loads(done.out)["memory"]
    assert memory["text"] == "from the file"
    assert memory["n"] == [1, 2] and memory["flag"] is True


def test_the_store_comes_from_the_option_or_the_environment(workdir: Workdir) -> None:
    ok(workdir.run(*RUN, "-q", "--store", "sqlite:///elsewhere.db"), 3)
    assert (workdir.path / "elsewhere.db").exists()
    assert not (workdir.path / "magistrate.db").exists()
    env = {"MAGISTRATE_STORE": str(workdir.path / "env.db")}
    ok(workdir.run(*RUN, "-q", env=env), 3)
    listed = json.loads(ok(workdir.run("runs", "--output", "json", env=env)).out)["runs"]
    assert len(listed) == 1 and listed[0]["status"] == "paused"


def test_an_input_the_entry_node_reads_and_no_input_gives_is_warned_of(workdir: Workdir) -> None:
    done = ok(workdir.run("run", "failing.yaml", "-q"), 1)  # load reads text: KeyError
    assert done.err == (
        "magistrate: warning: the entry node 'load' reads text, which no --input gives "
        "(--input text=VALUE)\n"
    )
    assert "KeyError: 'text'" in done.out
    assert "warning" not in ok(workdir.run("run", "failing.yaml", "-q", "--input", "text=x"), 1).err


def test_a_failed_run_exits_1_and_records_its_retries(workdir: Workdir) -> None:
    done = ok(workdir.run("run", "failing.yaml", "--input", "text=x"), 1)
    assert "boom failed (will retry): RuntimeError: the ledger is on fire" in done.err
    assert ": failed, quality failed" in done.out
    assert "after 2 steps, 1 node retry, " in done.out
    assert "Traceback" not in done.err


def test_cancel_a_paused_run_then_resume_it(workdir: Workdir) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    cancelled = ok(workdir.run("cancel", run_id, "--output", "json"))
    assert json.loads(cancelled.out)["status"] == "cancelled"
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "cancelled"
    again = ok(workdir.run("cancel", run_id), 4)  # it says what happened: exit 4
    assert again.err.startswith(f"magistrate: error: run {run_id} is cancelled: already cancelled")
    # Cancelled at a gate, a resume waits at the gate again: only an approval passes it.
    resumed = json.loads(ok(workdir.run("resume", run_id, *ALLOW, "--output", "json", "-q"), 3).out)
    assert (resumed["status"], resumed["paused_reason"]) == ("paused", "hitl")
    assert "reply" not in resumed["memory"]
    again = ok(
        workdir.run("resume", run_id, *ALLOW), 3
    )  # waiting at the gate: refused, nothing run
    assert "waits for approval at gate 'act'" in again.err
    approved = ok(
        workdir.run("approve", run_id, *ALLOW, "--by", "ops", "--input", "approved_by=ops")
    )
    assert "completed" in approved.out
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "completed"


def test_sigint_cancels_the_live_run_and_exits_4(workdir: Workdir) -> None:
    process = workdir.popen("run", "slow.yaml")
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while "wait started" not in seen:
            assert time.monotonic() < deadline, seen
            seen += process.stderr.readline()
        # A resume from another process is refused while the run is live here: exit 2.
        run_id = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"][0]["run_id"]
        taken = ok(workdir.run("resume", run_id, *ALLOW), 2)
        assert taken.err.startswith(
            f"magistrate: error: run '{run_id}' is live elsewhere: owned by "
        ), taken.err
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 4, (out, seen + err)
    assert ": cancelled" in out
    runs = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    assert [r["status"] for r in runs] == ["cancelled"]
    shown = json.loads(ok(workdir.run("show", runs[0]["run_id"], "--output", "json")).out)
    assert shown["error"] == "interrupted by SIGINT"


def test_fork_from_a_seq_runs_a_new_run_recorded_as_forked(workdir: Workdir) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    at = next(
        e["seq"] for e in events if e["type"] == "edge.taken" and e["body"]["source"] == "classify"
    )
    # Forked at the edge into the gated node, the fork stops at its gate too.
    gated = ok(workdir.run("fork", run_id, *ALLOW, "--at", str(at), "--output", "json", "-q"), 3)
    assert json.loads(gated.out)["resume_at"] == ["act"]
    # Forked at the pause, the fork waits at the gate; approving it runs it on.
    paused_at = next(e["seq"] for e in events if e["type"] == "run.paused")
    args = ("--at", str(paused_at), "--output", "json", "-q")
    fork = ok(workdir.run("fork", run_id, *ALLOW, *args), 3)
    fork_id = json.loads(fork.out)["run_id"]
    forked = ok(
        workdir.run(
            "approve",
            fork_id,
            *ALLOW,
            "--by",
            "boss",
            "--input",
            "approved_by=boss",
            "--output",
            "json",
        )
    )
    result = json.loads(forked.out)
    assert result["run_id"] != run_id and result["status"] == "completed"
    assert result["memory"]["reply"] == "[billing] approved by boss"
    shown = json.loads(ok(workdir.run("show", result["run_id"], "--output", "json")).out)
    origin = shown["forked_from"]
    assert (origin["run_id"], origin["seq"], len(origin["hash"])) == (run_id, paused_at, 64)
    assert shown["chain"]["ok"] is True
    # The source stays paused.
    source = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert source["status"] == "paused"
    bad = ok(workdir.run("fork", run_id, "--at", "9999"), 2)
    assert "cannot fork at seq 9999" in bad.err
    inside = ok(workdir.run("fork", run_id, "--at", str(at - 1)), 2)
    assert "its outgoing edge is not taken yet" in inside.err


def test_a_graph_with_a_model_needs_a_provider(workdir: Workdir) -> None:
    done = ok(workdir.run("run", "graph.yaml", "--input", "text=x"), 2)
    assert lines(done.err) == [
        "magistrate: error: this graph calls a model: give --provider "
        "openai|anthropic|scripted:FILE (or set OPENAI_API_KEY or ANTHROPIC_API_KEY)"
    ]
    assert not (workdir.path / "magistrate.db").exists()  # refused before the store is made


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "missing.yaml"], "missing.yaml: cannot read"),
        (["run", "graph.yaml", "--input", "novalue"], "--input 'novalue': expected KEY=VALUE"),
        (["run", "graph.yaml", "--provider", "scripted:nope.yaml"], "cannot read script"),
        (["run", "graph.yaml", "--provider", "gpt"], "--provider 'gpt': expected openai"),
        (["run", "graph.yaml", "--provider", "openai"], "--provider openai: no API key"),
        (["run", "graph.yaml", "--store", "mysql://x/y"], "unknown store URL scheme"),
        (["resume", "ghost"], "no store at magistrate.db"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(
    workdir: Workdir, args: list[str], message: str
) -> None:
    done = ok(workdir.run(*args), 2)
    assert len(lines(done.err)) == 1, done.err
    assert message in done.err
    assert "Traceback" not in done.err


def test_a_bad_graph_file_names_the_field_and_debug_shows_the_traceback(
    workdir: Workdir,
) -> None:
    workdir.write("bad.yaml", "id: x\nentry_node: nowhere\nnodes:\n  - {id: a, kind: wizard}\n")
    done = ok(workdir.run("run", "bad.yaml"), 2)
    assert done.err.startswith("magistrate: error: ")
    assert "kind" in done.err and "Traceback" not in done.err
    debug = workdir.run("--debug", "run", "bad.yaml")
    assert debug.code != 0 and "Traceback" in debug.err


def test_a_graph_file_s_problems_name_the_file(workdir: Workdir) -> None:
    workdir.write("typo.yaml", "id: x\nentry_nod: a\nnodes: [{id: a, function: m:f}]\n")
    workdir.write(
        "edge.yaml", "id: x\nentry_node: a\nnodes: [{id: a}]\nedges: [{source: a, target: b}]\n"
    )
    typo = ok(workdir.run("run", "typo.yaml"), 2)
    assert "unknown field `entry_nod`" in typo.err and "in typo.yaml" in typo.err
    edge = ok(workdir.run("serve", "--graph", "graph.yaml", "--graph", "edge.yaml"), 2)
    assert "edges[0].target: unknown node 'b'" in edge.err and "in edge.yaml" in edge.err


def test_pause_a_run_live_in_another_process_then_resume_it(workdir: Workdir) -> None:
    """``magistrate pause`` of a run live in another process records the request; the
    owner pauses at its next node boundary: the node running finishes, its outputs are
    kept, and the pause is recorded once; resume goes on without running it again."""
    process = workdir.popen("run", "patient.yaml")
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while "wait started" not in seen:
            assert time.monotonic() < deadline, seen
            seen += process.stderr.readline()
        run_id = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"][0]["run_id"]
        asked = json.loads(ok(workdir.run("pause", run_id, "--output", "json")).out)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (asked["status"], asked["pause_requested"]) == ("running", True)
    assert process.returncode == 3, (out, seen + err)  # the live run obeyed: paused
    assert ": paused" in out
    assert f"continue with: magistrate resume {run_id} --allow-imports triage_funcs\n" in out
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "paused" and shown["pending"] == ["after"]
    assert shown["paused"]["reason"] == "user"
    state = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)
    assert state["memory"] == {"progress": 2, "done": True}
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    tags = [e["type"] for e in events]
    assert tags.count("run.pause_requested") == 1 and tags.count("run.paused") == 1
    assert tags.index("run.pause_requested") < tags.index("node.completed")
    # A paused run cannot be paused again; resume picks it up.
    again = ok(workdir.run("pause", run_id), 4)
    assert again.err.startswith(f"magistrate: error: run {run_id} is paused: already paused")
    resumed = ok(workdir.run("resume", run_id, *ALLOW, "--output", "json", "-q"))
    assert json.loads(resumed.out)["status"] == "completed"
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    started = [e["body"]["node_id"] for e in events if e["type"] == "node.started"]
    assert started == ["wait", "after"]


def test_approve_records_the_approval_where_the_graph_cannot_run_and_leaves_the_run(
    workdir: Workdir,
) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    # A plain resume never passes the gate: exit 3, the run as it was.
    refused = ok(workdir.run("resume", run_id), 3)
    assert f"run {run_id} is paused: it waits for approval at gate 'act'" in refused.err
    # A gate whose node would lack input stays closed, naming what is missing.
    missing = ok(workdir.run("approve", run_id, *ALLOW, "--by", "ops"), 2)
    assert "its node needs approved_by" in missing.err
    # This process may not import the graph's functions: the approval is one event,
    # recorded, and the run is left for a process that can run it.
    recorded = ok(
        workdir.run(
            "approve",
            run_id,
            "--by",
            "ops",
            "--input",
            "approved_by=ops",
            "--allow-imports",
            "nothing_allowed",
        )
    )
    assert f"run {run_id}: decision by ops recorded; not executed here" in recorded.out
    assert "magistrate worker" in recorded.out
    events = [json.loads(line) for line in lines(ok(workdir.run("export", run_id)).out)]
    approvals = [e["body"] for e in events if e["type"].startswith("approval.")]
    assert approvals == [{"node_id": "act", "by": "ops", "input": {"approved_by": "ops"}}]
    assert events[-1]["type"] == "approval.granted"  # nothing ran here
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "running"
    # A process that can run it goes on through the approved gate.
    done = json.loads(ok(workdir.run("resume", run_id, *ALLOW, "--output", "json", "-q")).out)
    assert done["status"] == "completed"
    assert done["memory"]["reply"] == "[billing] approved by ops"


def test_a_rejection_where_the_graph_cannot_run_says_it_ended_the_run(workdir: Workdir) -> None:
    run_id = json.loads(ok(workdir.run(*RUN, "-q", "--output", "json"), 3).out)["run_id"]
    # This process may not import the graph's functions; the rejection (no on_failure
    # edge) ends the run all the same, and the answer says so, not "not executed here".
    args = ("approve", run_id, "--by", "ops", "--reject", "wrong category")
    text = ok(workdir.run(*args, "--allow-imports", "nothing_allowed"))
    assert text.out.strip() == (
        f"run {run_id}: decision by ops recorded; the decision ended the run (cancelled)"
    )
    again = ok(workdir.run(*args, "--output", "json"), 4)  # final: already cancelled
    assert "already cancelled" in again.err
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "cancelled"


def test_counts_read_in_the_number_they_need(workdir: Workdir) -> None:
    workdir.write(
        "one.yaml",
        'id: one\nentry_node: n\nnodes:\n  - {id: n, function: "triage_funcs:noted", '
        "output_keys: [noted]}\n",
    )
    one = ok(workdir.run("run", "one.yaml", "-q")).out.splitlines()[0]
    assert ": completed, quality clean after 1 step, 0 node retries, " in one
    failed = ok(workdir.run("run", "failing.yaml", "--input", "text=hi", "-q"), 1)
    assert ": failed, quality failed after 2 steps, 1 node retry, " in failed.out
    run_id = failed.out.split()[1].rstrip(":")
    shown = ok(workdir.run("show", run_id)).out
    assert "turns:     0, verdicts: none, node retries: 1\n" in shown
    assert "tokens:    0 input + 0 output tokens\n" in shown
    checked = ok(workdir.run("verify", "--all")).out
    assert checked.startswith("ok: 2 runs, 15 events checked, 2 recorded heads present")
    first = ok(workdir.run("verify", one.split()[1].rstrip(":"))).out
    assert first.startswith("ok: 1 run, 5 events checked, 1 recorded head present")
