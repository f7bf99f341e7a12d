"""Read and audit commands end to end in a subprocess: runs, show, timeline, state,
export, heads, verify and graph."""

from __future__ import annotations

import itertools
import json
import socket
import sqlite3
from pathlib import Path

import psycopg

from eventstore import chain_hash
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

from .conftest import ALLOW, Workdir, lines, ok

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
GRAPH_ID = "triage"


def _paused_and_completed(workdir: Workdir) -> tuple[str, str]:
    paused = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]
    done = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]
    ok(workdir.run("approve", done, *ALLOW, "--input", "approved_by=ops", "-q"))
    return paused, done


def test_runs_lists_newest_first_and_filters_by_status(workdir: Workdir) -> None:
    paused, done = _paused_and_completed(workdir)
    listed = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"]
    assert [r["run_id"] for r in listed] == [done, paused]
    assert [r["status"] for r in listed] == ["completed", "paused"]
    only = json.loads(ok(workdir.run("runs", "--status", "paused", "--output", "json")).out)
    assert [r["run_id"] for r in only["runs"]] == [paused] and only["next_cursor"] is None
    # A JSON page carries the next page's cursor (a program pages without reading stderr).
    page = json.loads(ok(workdir.run("runs", "--limit", "1", "--output", "json")).out)
    assert [r["run_id"] for r in page["runs"]] == [done]
    args = ("runs", "--limit", "1", "--cursor", page["next_cursor"], "--output", "json")
    assert [r["run_id"] for r in json.loads(ok(workdir.run(*args)).out)["runs"]] == [paused]
    assert ok(workdir.run("runs", "-q")).out == f"{done}\n{paused}\n"
    text = ok(workdir.run("runs")).out
    header, *rows = lines(text)
    assert header.split()[:6] == ["run", "graph", "status", "quality", "owner", "events"]
    assert rows[0].split()[:5] == [done, GRAPH_ID, "completed", "clean", "-"]
    # The commands that ran them gave their claims up: no process holds either run.
    assert [(r["owner"], r["ownership"]) for r in listed] == [(None, "unclaimed")] * 2


def test_runs_filters_by_quality_graph_and_time_and_pages_with_a_cursor(
    workdir: Workdir,
) -> None:
    paused, done = _paused_and_completed(workdir)
    third = json.loads(ok(workdir.run(*RUN), 3).out)["run_id"]

    def ids(*args: str) -> list[str]:
        return [
            r["run_id"]
            for r in json.loads(ok(workdir.run("runs", *args, "--output", "json")).out)["runs"]
        ]

    assert ids("--quality", "clean") == [done]
    assert ids("--graph", GRAPH_ID) == [third, done, paused]
    assert ids("--graph", "other") == []
    assert ids("--graph", GRAPH_ID, "--status", "paused") == [third, paused]
    assert ids("--since", "1h") == [third, done, paused]
    assert ids("--until", "2000-01-01") == []
    assert ids("--since", "2000-01-01T00:00:00+00:00", "--until", "4102444800") == [
        third,
        done,
        paused,
    ]
    first = ok(workdir.run("runs", "--limit", "2"))
    assert [row.split()[0] for row in lines(first.out)[1:]] == [third, done]
    cursor = first.err.split("--cursor ")[1].split()[0]
    assert ok(workdir.run("runs", "--limit", "2", "-q")).err == ""  # -q: ids only
    rest = ok(workdir.run("runs", "--limit", "2", "-q", "--cursor", cursor))
    assert rest.out == f"{paused}\n" and "--cursor" not in rest.err
    assert "not a run listing cursor" in ok(workdir.run("runs", "--cursor", "x"), 2).err
    assert "is not a time" in ok(workdir.run("runs", "--since", "yesterday"), 2).err


def test_show_summarises_a_run(workdir: Workdir) -> None:
    _, done = _paused_and_completed(workdir)
    data = json.loads(ok(workdir.run("show", done, "--output", "json")).out)
    assert data["graph"] == "triage" and data["status"] == "completed"
    assert data["quality"] == "clean"
    assert data["path"] == ["load", "classify", "act"]
    assert data["turns"] == 5 and data["verdicts"] == {"retry": 1, "accept": 1}
    assert data["chain"] == {
        "ok": True,
        "scope": "full",
        "from_seq": 1,
        "to_seq": data["events"],
        "broken_at": None,
        "reason": None,
    }
    assert (data["owner"], data["ownership"]) == (None, "unclaimed")
    text = ok(workdir.run("show", done)).out
    assert "owner:     -\n" in text
    assert "path:      load -> classify -> act" in text
    assert "chain:     verified" in text


def test_timeline_shows_turns_tools_verdicts_memory_edges_and_pauses(workdir: Workdir) -> None:
    paused, done = _paused_and_completed(workdir)
    # An unfinished run has no quality yet: shown as "-", not Python's None.
    waiting = ok(workdir.run("timeline", paused)).out
    assert "status: paused   quality: -   path: load -> classify\n" in waiting
    text = ok(workdir.run("timeline", done)).out
    assert "calls lookup(customer='ann')" in text
    assert 'lookup -> {"customer":"ann","tier":"gold"}' in text
    assert "RETRY [Level 2 quality] confidence 0.70: category must be billing or technical" in text
    # The turn that called lookup is a tool turn, not a judged RETRY.
    assert "tool turn #1" in text and "not judged (RETRY [tool-call bail-out])" in text
    assert "RETRY [tool-call bail-out]\n" not in text
    assert "verdicts: 2 (1 RETRY, 1 ACCEPT)" in text
    assert "memory.written      category = 'billing'" in text
    assert "classify -> act (on_success)" in text
    assert "paused (hitl) before act" in text
    assert "approved_by = 'ops'" in text  # the injected input
    events = len(lines(ok(workdir.run("export", done)).out))
    assert f"verify: ok ({events} events, hash chain intact)" in text
    data = json.loads(ok(workdir.run("timeline", done, "--output", "json")).out)
    assert data["verify"]["ok"] is True and len(data["events"]) == events
    verdicts = [e for e in data["events"] if e["type"] == "judge.verdict"]
    assert [v["node"] for v in verdicts] == ["classify"] * 5


def test_state_travels_in_time(workdir: Workdir) -> None:
    _, done = _paused_and_completed(workdir)
    events = [json.loads(line) for line in lines(ok(workdir.run("export", done)).out)]
    written = next(
        e["seq"] for e in events if e["type"] == "memory.written" and e["body"]["key"] == "category"
    )
    before = json.loads(
        ok(workdir.run("state", done, "--at", str(written - 1), "--output", "json")).out
    )
    after = json.loads(ok(workdir.run("state", done, "--at", str(written), "--output", "json")).out)
    assert "category" not in before["memory"] and after["memory"]["category"] == "billing"
    assert before["last_seq"] == written - 1 and before["status"] == "running"
    now = json.loads(ok(workdir.run("state", done, "--output", "json")).out)
    assert now["status"] == "completed" and now["memory"]["reply"].endswith("by ops")
    # The JSON says what the read checked, as show's does.
    assert now["chain"]["ok"] is True and now["chain"]["to_seq"] == now["last_seq"]
    text = ok(workdir.run("state", done, "--at", str(written))).out
    assert text.startswith(f"run {done} at seq {written}: running")
    assert '  category: "billing"' in text
    assert "argument --at: 0 is not from 1 to" in ok(workdir.run("state", done, "--at", "0"), 2).err
    past = ok(workdir.run("state", done, "--at", str(now["last_seq"] + 1)), 2).err
    assert f"past the run's last event (seq {now['last_seq']})" in past


def test_export_writes_one_event_per_line_whose_hashes_chain(workdir: Workdir) -> None:
    _, done = _paused_and_completed(workdir)
    events = [json.loads(line) for line in lines(ok(workdir.run("export", done)).out)]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.finished"
    assert set(events[0]) == {
        "run_id",
        "seq",
        "position",
        "ts",
        "type",
        "version",
        "prev_hash",
        "hash",
        "body",
    }
    for prev, event in itertools.pairwise(events):
        assert event["prev_hash"] == prev["hash"]
    assert events[-1]["body"]["status"] == "completed"
    # The first event's hash is recomputable from the exported fields.
    import msgspec

    first = events[0]
    body = msgspec.json.encode({"type": first["type"], **first["body"]})
    assert chain_hash("", done, 1, first["type"], first["version"], body) == first["hash"]
    assert "no run with id 'ghost'" in ok(workdir.run("export", "ghost"), 2).err


def test_heads_and_verify_detect_a_lost_tail_that_the_chain_alone_cannot(
    workdir: Workdir,
) -> None:
    paused, done = _paused_and_completed(workdir)
    finished = ok(workdir.run("heads")).out
    assert [line.split()[0] for line in lines(finished)] == [done]
    every = json.loads(ok(workdir.run("heads", "--all", "--output", "json")).out)
    assert {h["run_id"] for h in every} == {paused, done}
    (workdir.path / "heads.txt").write_text(finished)
    assert ok(workdir.run("verify", "--all", "--against", "heads.txt")).out.startswith("ok: 2 run")
    assert ok(workdir.run("verify", done)).out.startswith("ok: 1 run, ")

    # Roll the completed run back by its last commit, as a damaged WAL would: both the
    # events and the run's listing lose it. The chain that is left is intact.
    db = sqlite3.connect(workdir.path / "magistrate.db")
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (done,)).fetchone()
        db.execute(
            "DELETE FROM events WHERE position = (SELECT max(position) FROM events WHERE run = ?)",
            (key,),
        )
        db.execute(
            "UPDATE runs SET last_seq = (SELECT max(seq + length(hash) / 32 - 1) "
            "FROM events WHERE run = ?), last_hash = (SELECT substr(hash, -32) FROM events "
            "WHERE run = ? ORDER BY seq DESC LIMIT 1), status = 'running' WHERE run = ?",
            (key, key, key),
        )
    db.close()
    # The chain alone (no heads file) sees nothing wrong.
    assert ok(workdir.run("verify", "--all", "--heads", "none")).out.startswith("ok: 2 run")
    lost = ok(workdir.run("verify", "--all", "--heads", "none", "--against", "heads.txt"), 1)
    seq = finished.split()[1]
    assert f"FAILED {done} at seq {seq}: log lost its tail" in lost.out
    data = json.loads(
        ok(
            workdir.run(
                "verify", done, "--heads", "none", "--against", "heads.txt", "--output", "json"
            ),
            1,
        ).out
    )
    assert data["ok"] is False and data["problems"][0]["run_id"] == done
    # The heads file beside the store, which the commands wrote as the runs paused and
    # ended, catches it with nothing kept by hand.
    default = ok(workdir.run("verify", "--all"), 1).out
    assert f"FAILED {done} at seq {seq}: log lost its tail" in default
    assert "magistrate.db.heads" in default and "1 problem: 2 runs" in default


def test_the_heads_file_beside_the_store_catches_a_rechained_log_and_its_own_edit(
    workdir: Workdir,
) -> None:
    paused, done = _paused_and_completed(workdir)
    heads = workdir.path / "magistrate.db.heads"
    recorded = [json.loads(line) for line in lines(heads.read_text())]
    assert {r["run"] for r in recorded} == {paused, done}
    report = json.loads(ok(workdir.run("verify", "--all", "--output", "json")).out)
    assert report["ok"] and report["recorded_heads"] == 2
    assert report["heads_file"] == "magistrate.db.heads"
    assert "2 recorded heads present" in ok(workdir.run("verify", "--all")).out
    # A store rewritten with runs of the same ids whose chains are intact: another file
    # put in its place (the heads file stays).
    (workdir.path / "magistrate.db").rename(workdir.path / "old.db")
    for name in ("magistrate.db-wal", "magistrate.db-shm"):
        (workdir.path / name).unlink(missing_ok=True)
    heads.rename(workdir.path / "kept.heads")
    other = _paused_and_completed(workdir)
    (workdir.path / "kept.heads").replace(heads)
    assert ok(workdir.run("verify", "--all", "--heads", "none")).out.startswith("ok")
    rewritten = ok(workdir.run("verify", "--all"), 1).out
    # Other run ids: the runs the heads file names are missing from the store.
    assert f"FAILED {done}" in rewritten and "run missing from the store" in rewritten
    assert set(other).isdisjoint({paused, done})
    # An edited heads file is reported once, by line.
    text = heads.read_text().replace('"seq":', '"seq":1', 1)
    heads.write_text(text)
    edited = ok(workdir.run("verify", other[0]), 1).out
    assert "FAILED heads file magistrate.db.heads: line 1: its link does not follow" in edited


def test_verify_and_timeline_detect_an_edited_event(workdir: Workdir) -> None:
    paused, done = _paused_and_completed(workdir)
    db = sqlite3.connect(workdir.path / "magistrate.db")
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = ?", (done,)).fetchone()
        db.execute(
            "UPDATE events SET hash = zeroblob(length(hash)) WHERE run = ? AND seq = 3", (key,)
        )
    db.close()
    broken = ok(workdir.run("verify", done), 1)
    assert f"FAILED {done} at seq 3: hash mismatch" in broken.out
    assert ok(workdir.run("verify", paused)).out.startswith("ok")
    assert "1 problem: 2 runs" in ok(workdir.run("verify", "--all"), 1).out
    timeline = ok(workdir.run("timeline", done), 1)
    assert "verify: FAILED at seq 3" in timeline.out
    assert "chain:     BROKEN at seq 3" in ok(workdir.run("show", done), 1).out


def test_verify_refuses_ambiguous_or_unknown_targets(workdir: Workdir) -> None:
    paused, _ = _paused_and_completed(workdir)
    assert "verify takes a RUN or --all" in ok(workdir.run("verify"), 2).err
    assert "verify takes a RUN or --all" in ok(workdir.run("verify", paused, "--all"), 2).err
    assert "no run with id 'ghost'" in ok(workdir.run("verify", "ghost"), 2).err
    workdir.write("bad-heads.txt", "not a head\n")
    assert (
        "expected 'RUN SEQ HASH'"
        in ok(workdir.run("verify", "--all", "--against", "bad-heads.txt"), 2).err
    )


def test_read_commands_refuse_a_file_that_is_not_a_store(workdir: Workdir) -> None:
    (workdir.path / "notes.db").write_text("shopping list\n")
    done = ok(workdir.run("runs", "--store", "notes.db"), 2)
    assert "not a magistrate event store" in done.err
    assert (workdir.path / "notes.db").read_text() == "shopping list\n"
    assert "no store at missing.db" in ok(workdir.run("runs", "--store", "missing.db"), 2).err
    assert not Path(workdir.path / "missing.db").exists()


def test_read_commands_refuse_an_empty_file_and_leave_it_empty(workdir: Workdir) -> None:
    # SQLite takes an empty file for an empty database: reading must not make it a store.
    (workdir.path / "notes.txt").write_text("")
    for command in (["runs"], ["heads"], ["verify", "--all"], ["show", "abc"]):
        done = ok(workdir.run(*command, "--store", "notes.txt"), 2)
        assert "no store at notes.txt: the file is empty" in done.err
        assert (workdir.path / "notes.txt").read_bytes() == b""


def test_a_postgresql_server_nobody_answers_is_a_usage_error_naming_it_without_password(
    workdir: Workdir,
) -> None:
    with socket.socket() as sock:  # a loopback port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://opsuser7:hunter2@127.0.0.1:{port}/test?connect_timeout=5"
    run = ["run", "graph.yaml", "-q", "--provider", "scripted:script.yaml"]  # to the store
    for command in (["runs"], ["show", "abc"], run):
        done = ok(workdir.run(*command, "--store", url), 2)
        assert done.out == ""
        (line,) = done.err.splitlines()  # one line, no traceback
        assert line.startswith(f"magistrate: error: postgresql://127.0.0.1:{port}/test ")
        assert "cannot connect" in line and "StoreError" not in line
        assert "hunter2" not in line and "opsuser7" not in line


def test_commands_that_need_a_store_create_no_postgresql_schema_and_name_the_missing_one(
    workdir: Workdir,
) -> None:
    pg_url()
    prefix = fresh_prefix()
    store = f"{pg_url()}?schema={prefix}_typo"
    try:
        for command in (
            ["runs"],
            ["show", "abc"],
            ["state", "abc"],
            ["timeline", "abc"],
            ["export", "abc"],
            ["verify", "--all"],
            ["heads"],
            ["replay", "abc"],
            ["resume", "abc"],
            ["approve", "abc"],
            ["fork", "abc", "--at", "1"],
            ["pause", "abc"],
            ["cancel", "abc"],
        ):
            done = ok(workdir.run(*command, "--store", store), 2)
            (line,) = done.err.splitlines()  # one line, no traceback
            assert f"schema {prefix}_typo: no event store there: no such schema" in line
            assert "nothing was created" in line and "StoreMissingError" not in line
            assert _schemas(prefix) == [], command
        # A command that writes makes the store, as a first run into a SQLite file does.
        ok(workdir.run("run", "failing.yaml", "--input", "text=hi", "-q", "--store", store), 1)
        assert _schemas(prefix) == [f"{prefix}_typo"]
        assert len(lines(ok(workdir.run("runs", "--store", store)).out)) == 2
    finally:
        drop_schemas(prefix)


def _schemas(prefix: str) -> list[str]:
    with psycopg.connect(pg_url()) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall()
    return sorted(str(row[0]) for row in rows)


def test_run_into_a_missing_directory_is_a_usage_error(workdir: Workdir) -> None:
    done = ok(
        workdir.run(
            "run", "graph.yaml", "--provider", "scripted:script.yaml", "--store", "nodir/runs.db"
        ),
        2,
    )
    assert done.err.startswith("magistrate: error: nodir/runs.db: ")
    assert "does not exist" in done.err and "StoreFileError" not in done.err


def test_graph_draws_a_mermaid_flowchart(workdir: Workdir) -> None:
    text = ok(workdir.run("graph", "graph.yaml")).out
    assert text.startswith("flowchart TD\n")
    assert '    n1(["classify<br/><small>llm</small>"])' in text
    assert '    n0 -->|"on_success"| n1' in text
    assert "    start((start)) --> n0" in text
    assert "    class n2 pause" in text
    data = json.loads(ok(workdir.run("graph", "graph.yaml", "--output", "json")).out)
    assert data == {"graph": "triage", "mermaid": text}


JUDGED = """
id: judged
entry_node: classify
terminal_nodes: [classify]
nodes:
  - id: classify
    kind: llm
    output_keys: [category]
    success_criteria: [category is billing or technical]
"""

JUDGE_DOWN = """
turns:
  - tool_calls: [{name: set_output, arguments: {key: category, value: billing}}]
  - "done"
judge:
  - {error: "temperature is not supported", status: 400}
  - {error: "temperature is not supported", status: 400}
  - {error: "temperature is not supported", status: 400}
"""


def test_show_lists_the_checks_that_did_not_run(workdir: Workdir) -> None:
    workdir.write("judged.yaml", JUDGED)
    workdir.write("judge_down.yaml", JUDGE_DOWN)
    args = ("run", "judged.yaml", "--provider", "scripted:judge_down.yaml", "-q")
    run_id = json.loads(ok(workdir.run(*args, "--output", "json"), 1).out)["run_id"]  # degraded
    data = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert (data["status"], data["quality"]) == ("completed", "degraded")
    failures = data["judge_failures"]
    assert (failures["total"], failures["by_kind"]) == (1, {"judge": 1})
    [reason] = failures["reasons"]
    assert (reason["kind"], reason["node_id"]) == ("judge", "classify")
    assert "temperature is not supported" in reason["reason"]
    text = ok(workdir.run("show", run_id)).out
    assert "judge failures: 1 (1 judge), checks not run or passed:" in text
    assert f"seq {reason['seq']}, judge at classify: " in text
    # A run whose checks all ran has no such field.
    _, done = _paused_and_completed(workdir)
    assert (
        json.loads(ok(workdir.run("show", done, "--output", "json")).out)["judge_failures"] is None
    )
    assert "judge failures" not in ok(workdir.run("show", done)).out
