"""``submit``, ``pause`` and ``cancel`` print their answer once the action is recorded: a
reader of stdout gone by then (``magistrate cancel R | head -0``), or no stdout at all
(``>&-``), leaves the exit code of what was done, 0, so a script does not do it again.

``run``, ``resume``, ``approve`` and ``fork`` do the same (test_cli_polish_runs.py)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from .conftest import MAGISTRATE, Workdir, ok

#: How the answer meets the pipe no one reads: at once (each write goes through), or when
#: stdout is flushed as the interpreter exits (a pipe's stdout is block-buffered).
BUFFERING = pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
OUTPUTS = pytest.mark.parametrize("output", ["text", "json"])

SUBMIT = ("submit", "graph.yaml", "--input", "text=refund please")


def _departed(workdir: Workdir, buffered: bool, *args: str) -> subprocess.CompletedProcess[str]:
    """``magistrate ARGS`` with stdout a pipe whose read end is closed before it starts."""
    env = workdir.env()
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [str(MAGISTRATE), *args],
            cwd=workdir.path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=45,
        )
    finally:
        os.close(write)


def _closed(workdir: Workdir, *args: str) -> subprocess.CompletedProcess[str]:
    """``magistrate ARGS >&-``: started with no fd 1."""
    return subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&-', str(MAGISTRATE), *args],
        cwd=workdir.path,
        env=workdir.env(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=45,
    )


def _succeeded_quietly(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr}"
    assert done.stderr == "", done.stderr  # no traceback, error or "Exception ignored"


def _run(workdir: Workdir, store_url: str, run_id: str) -> dict[str, Any]:
    listed = json.loads(ok(workdir.run("runs", "--store", store_url, "--output", "json")).out)
    runs: dict[str, dict[str, Any]] = {run["run_id"]: run for run in listed["runs"]}
    assert list(runs) == [run_id], runs
    return runs[run_id]


def _events(workdir: Workdir, store_url: str, run_id: str) -> list[dict[str, Any]]:
    exported = ok(workdir.run("export", run_id, "--store", store_url)).out
    return [json.loads(line) for line in exported.splitlines()]


@BUFFERING
@OUTPUTS
def test_submit_whose_stdout_reader_went_away_exits_0_with_the_run_submitted(
    workdir: Workdir, store_url: str, buffered: bool, output: str
) -> None:
    done = _departed(
        workdir, buffered, *SUBMIT, "--run-id", "r1", "--store", store_url, "--output", output
    )
    _succeeded_quietly(done)
    run = _run(workdir, store_url, "r1")
    assert (run["status"], run["owner"]) == ("running", None)
    assert [e["type"] for e in _events(workdir, store_url, "r1")] == ["run.started"]


@BUFFERING
@OUTPUTS
@pytest.mark.parametrize(
    ("control", "status"),
    [(("pause",), "paused"), (("cancel", "--reason", "not wanted"), "cancelled")],
    ids=["pause", "cancel"],
)
def test_a_control_whose_stdout_reader_went_away_exits_0_with_it_recorded(
    workdir: Workdir,
    store_url: str,
    buffered: bool,
    output: str,
    control: tuple[str, ...],
    status: str,
) -> None:
    # A submitted run: running, with no owner; the control is recorded in its log at once.
    ok(workdir.run(*SUBMIT, "--run-id", "r1", "--store", store_url))
    name, *options = control
    done = _departed(
        workdir, buffered, name, "r1", *options, "--store", store_url, "--output", output
    )
    _succeeded_quietly(done)
    assert _run(workdir, store_url, "r1")["status"] == status
    events = _events(workdir, store_url, "r1")
    assert [e["type"] for e in events] == ["run.started", f"run.{status}"]  # recorded once
    if name == "cancel":
        assert events[-1]["body"]["reason"] == "not wanted"


def test_submit_pause_and_cancel_with_stdout_closed_exit_0_with_each_recorded(
    workdir: Workdir,
) -> None:
    # No fd 1 at all: the store (created by submit) must not take it, where the answer
    # would be written into the database file.
    store = "runs.db"
    _succeeded_quietly(_closed(workdir, *SUBMIT, "--run-id", "r1", "--store", store))
    assert _run(workdir, store, "r1")["status"] == "running"
    _succeeded_quietly(_closed(workdir, "pause", "r1", "--store", store, "--output", "json"))
    assert _run(workdir, store, "r1")["status"] == "paused"
    _succeeded_quietly(_closed(workdir, "cancel", "r1", "--store", store))
    assert _run(workdir, store, "r1")["status"] == "cancelled"
    events = _events(workdir, store, "r1")
    assert [e["type"] for e in events] == ["run.started", "run.paused", "run.cancelled"]
    ok(workdir.run("verify", "--all", "--store", store))


@BUFFERING
def test_submit_and_cancel_to_a_full_stdout_keep_exit_0_and_say_so_once(
    workdir: Workdir, buffered: bool
) -> None:
    # A stdout that cannot take the answer for another reason than a departed reader
    # (``> /dev/full``): the action is recorded all the same, so the exit code stays 0,
    # and one line on stderr says the output was lost.
    env = workdir.env()
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    store = "runs.db"

    def to_full(*args: str) -> subprocess.CompletedProcess[str]:
        with open("/dev/full", "w") as full:
            return subprocess.run(
                [str(MAGISTRATE), *args, "--store", store],
                cwd=workdir.path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=45,
            )

    for done in (to_full(*SUBMIT, "--run-id", "r1"), to_full("cancel", "r1")):
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr}"
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("magistrate: error: cannot write to stdout: No space left")
    assert _run(workdir, store, "r1")["status"] == "cancelled"
    events = _events(workdir, store, "r1")
    assert [e["type"] for e in events] == ["run.started", "run.cancelled"]
