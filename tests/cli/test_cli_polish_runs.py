"""``run`` refuses before it opens a store, ends with the run's exit code whatever became
of stdout's reader, and the command it prints to continue a run names its heads file."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from .conftest import ALLOW, MAGISTRATE, Workdir, ok

LLM = """
id: asks
entry_node: ask
nodes:
  - {id: ask, kind: llm, output_keys: [answer]}
"""

UNIMPORTABLE = """
id: lost
entry_node: a
nodes:
  - {id: a, function: "no_such_module_here:a", output_keys: [x]}
"""

DONE = """
id: done
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
"""

PAUSED = ("graph.yaml", "--input", "text=refund please", "--provider", "scripted:script.yaml")


def _no_store(workdir: Workdir, store_url: str) -> None:
    """Nothing was created: the store is not there for a command that does not create one."""
    refused = ok(workdir.run("runs", "--store", store_url), 2)
    assert "no store" in refused.err or "no event store there: no such schema" in refused.err, (
        refused.err
    )
    assert not (workdir.path / "runs.db.heads").exists()


@pytest.mark.parametrize(
    ("graph", "options", "says"),
    [
        ("done.yaml", ["--tools", "no_such_tools_module"], "--tools 'no_such_tools_module'"),
        ("llm.yaml", [], "this graph calls a model"),
        ("llm.yaml", ["--provider", "openai"], "no API key: set the OPENAI_API_KEY"),
        ("llm.yaml", ["--provider", "scripted:missing.yaml"], "cannot read script"),
        ("lost.yaml", [], "cannot import module 'no_such_module_here'"),
    ],
)
def test_a_refused_run_creates_no_store(
    workdir: Workdir, store_url: str, graph: str, options: list[str], says: str
) -> None:
    workdir.write("llm.yaml", LLM)
    workdir.write("lost.yaml", UNIMPORTABLE)
    workdir.write("done.yaml", DONE)
    refused = ok(workdir.run("run", graph, "--input", "text=x", "--store", store_url, *options), 2)
    assert says in refused.err, refused.err
    assert "Traceback" not in refused.err
    _no_store(workdir, store_url)


def _run_with_stdout(workdir: Workdir, stdout: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MAGISTRATE), *args],
        cwd=workdir.path,
        env=workdir.env(),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=45,
    )


def _statuses(workdir: Workdir, store_url: str) -> list[str]:
    listed = ok(workdir.run("runs", "--store", store_url, "--output", "json")).out
    return [run["status"] for run in json.loads(listed)["runs"]]


@pytest.mark.parametrize(
    ("args", "code", "status"), [(PAUSED, 3, "paused"), (("done.yaml",), 0, "completed")]
)
def test_a_run_whose_stdout_reader_went_away_exits_with_its_status(
    workdir: Workdir, store_url: str, args: tuple[str, ...], code: int, status: str
) -> None:
    # ``magistrate run G | head -0``: the result meets a pipe no one reads any more.
    workdir.write("done.yaml", DONE)
    read, write = os.pipe()
    os.close(read)
    try:
        done = _run_with_stdout(
            workdir, write, "run", *args, "--input", "text=x", "--store", store_url
        )
    finally:
        os.close(write)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    assert _statuses(workdir, store_url) == [status]


@pytest.mark.parametrize(
    ("args", "code", "status"), [(PAUSED, 3, "paused"), (("done.yaml",), 0, "completed")]
)
def test_a_run_with_stdout_closed_runs_and_exits_with_its_status(
    workdir: Workdir, args: tuple[str, ...], code: int, status: str
) -> None:
    # ``magistrate run G >&-``: no stdout at all; the store (opened after start-up) must not
    # take its descriptor, where the result would be written into it.
    workdir.write("done.yaml", DONE)
    words = shlex.join(["run", *args, "--input", "text=x", "--store", "runs.db"])
    done = subprocess.run(
        ["sh", "-c", f'exec "$0" {words} >&-', str(MAGISTRATE)],
        cwd=workdir.path,
        env=workdir.env(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=45,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    assert _statuses(workdir, "runs.db") == [status]
    ok(workdir.run("verify", "--all", "--store", "runs.db"))


def test_the_continue_command_names_the_heads_file(workdir: Workdir, store_url: str) -> None:
    heads = workdir.path / "kept heads" / "my.heads"
    heads.parent.mkdir()
    first = ok(workdir.run("run", *PAUSED, "--store", store_url, "--heads", str(heads)), 3)
    run_id = first.out.split()[1].rstrip(":")
    line = next(x for x in first.out.splitlines() if "continue with: " in x)
    command = line.partition("continue with: ")[2]
    assert f"--heads {shlex.quote(str(heads))}" in command, command
    # The command, as printed, continues the run with the same heads file.
    first_word, *words = shlex.split(command.replace("[--input KEY=VALUE]", ""))
    assert first_word == "magistrate"
    words = [store_url if word == "URL" else word for word in words]
    done = json.loads(
        ok(workdir.run(*words, "--input", "approved_by=ops", "--output", "json", "-q")).out
    )
    assert (done["run_id"], done["status"]) == (run_id, "completed")
    assert run_id in heads.read_text()
    ok(workdir.run("verify", run_id, "--store", store_url, "--heads", str(heads)))


def test_the_continue_command_leaves_out_the_default_heads_file(workdir: Workdir) -> None:
    store = Path("runs.db")
    first = ok(workdir.run("run", *PAUSED, "--store", str(store), "--heads", "runs.db.heads"), 3)
    assert "continue with: " in first.out
    assert "--heads" not in first.out
    assert ALLOW[1] in first.out


def test_an_approval_left_to_others_names_the_heads_file(workdir: Workdir) -> None:
    # Approved where the graph may not be imported: the command that runs it here, and the
    # note of a second approval, name the heads file as the continue command does.
    heads = "other heads"
    named = ("--store", "runs.db", "--heads", heads)
    first = ok(workdir.run("run", *PAUSED, *named, "-q"), 3)
    run_id = first.out.split()[1].rstrip(":")
    resume = f"magistrate resume {run_id} --store runs.db --heads '{heads}' --allow-imports "
    recorded = ok(workdir.run("approve", run_id, *named, "--input", "approved_by=ops"))
    assert f"to run it here: {resume}triage_funcs" in recorded.out, recorded.out
    again = ok(workdir.run("approve", run_id, *named, "--input", "approved_by=eve"), 2)
    assert f"nothing executes it now: {resume}triage_funcs continues it here" in again.err
