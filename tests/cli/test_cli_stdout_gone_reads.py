"""The read commands (and ``--help``) with a stdout they cannot write, in real subprocesses.

A reader that went away (``magistrate runs | head -1``) ends the command quietly, exit 1,
whether Python's stdout is unbuffered (``PYTHONUNBUFFERED``: the write fails at once) or
buffered (a pipe's stdout is: the write fails only when stdout is flushed, which without
``main``'s own flush would be at the interpreter's exit, as "Exception ignored", exit 120).
A stdout that fails for another reason (``> /dev/full``) is said in one line, exit 1.

``submit``, ``pause`` and ``cancel`` keep their own code: test_cli_departed_stdout.py."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import MAGISTRATE, Workdir, ok

DONE = """
id: done
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
"""

#: Each command, with ``RUN`` for the finished run's id; each writes to stdout and exits 0.
COMMANDS = [
    ("runs",),
    ("runs", "--output", "json"),
    ("show", "RUN"),
    ("show", "RUN", "--output", "json"),
    ("export", "RUN"),
    ("verify", "RUN"),
    ("state", "RUN"),
    ("timeline", "RUN"),
    ("heads",),
    ("replay", "RUN", "--graph", "done.yaml", "--allow-imports", "triage_funcs"),
    ("--help",),
]

#: The modes a child's stdout may be in: written at once, or buffered until flushed.
MODES = ("unbuffered", "buffered")

FULL = "/dev/full"

#: How a stdout that cannot take the output is said.
NO_SPACE = "magistrate: error: cannot write to stdout: No space left on device; "


@dataclass
class Finished:
    """A store holding one completed run."""

    store: str
    run_id: str

    def args(self, words: tuple[str, ...]) -> list[str]:
        """A command's words as its command line, ``RUN`` as the run's id."""
        args = [self.run_id if word == "RUN" else word for word in words]
        return args if args == ["--help"] else [*args, "--store", self.store]


@pytest.fixture
def finished(workdir: Workdir) -> Finished:
    workdir.write("done.yaml", DONE)
    store = str(workdir.path / "runs.db")
    ok(workdir.run("run", "done.yaml", "--input", "text=hello", "--store", store, "-q"))
    (run_id,) = ok(workdir.run("runs", "-q", "--store", store)).out.split()
    return Finished(store, run_id)


def _env(workdir: Workdir, mode: str) -> dict[str, str]:
    env = workdir.env()
    env.pop("PYTHONUNBUFFERED", None)  # buffered: as Python is with no such variable
    if mode == "unbuffered":
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _with_stdout(
    workdir: Workdir, mode: str, args: list[str], stdout: int
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MAGISTRATE), *args],
        cwd=workdir.path,
        env=_env(workdir, mode),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=45,
    )


def _departed(workdir: Workdir, mode: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``magistrate ARGS`` with stdout a pipe whose read end is closed before it starts."""
    read, write = os.pipe()
    os.close(read)
    try:
        return _with_stdout(workdir, mode, args, write)
    finally:
        os.close(write)


def _full(workdir: Workdir, mode: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``magistrate ARGS > /dev/full``: every write to stdout fails with ENOSPC."""
    fd = os.open(FULL, os.O_WRONLY)
    try:
        return _with_stdout(workdir, mode, args, fd)
    finally:
        os.close(fd)


def _writes_stdout(workdir: Workdir, args: list[str]) -> None:
    """The command, read to its end, succeeds with output: there is something to lose."""
    done = ok(workdir.run(*args))
    assert done.out.strip(), f"{args} wrote nothing to stdout"


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c[:3]) for c in COMMANDS])
def test_a_read_whose_stdout_reader_went_away_exits_1_quietly_buffered_or_not(
    workdir: Workdir, finished: Finished, words: tuple[str, ...]
) -> None:
    args = finished.args(words)
    _writes_stdout(workdir, args)
    for mode in MODES:
        done = _departed(workdir, mode, args)
        # No traceback, no error line, no "Exception ignored ... BrokenPipeError" (exit 120).
        assert (done.returncode, done.stderr) == (1, ""), f"{mode}: exit {done.returncode}"


@pytest.mark.skipif(not Path(FULL).exists(), reason="no /dev/full here")
def test_a_large_export_whose_stdout_fails_while_it_writes_ends_as_a_small_one(
    workdir: Workdir, finished: Finished
) -> None:
    # More than a pipe's or a file's buffer: the write fails while the command still
    # runs, buffered or not (not only when stdout is flushed at the end).
    big = "x" * 70_000
    store = finished.store
    ok(workdir.run("run", "done.yaml", "--input", f"text={big}", "--store", store, "-q"))
    newest = ok(workdir.run("runs", "-q", "--store", store)).out.split()[0]
    args = ["export", newest, "--store", store]
    assert big in ok(workdir.run(*args)).out
    for mode in MODES:
        done = _departed(workdir, mode, args)
        assert (done.returncode, done.stderr) == (1, ""), f"{mode}: exit {done.returncode}"
        done = _full(workdir, mode, args)
        assert done.returncode == 1, f"{mode}: exit {done.returncode}\n{done.stderr}"
        (line,) = done.stderr.splitlines()
        assert line.startswith(NO_SPACE), f"{mode}: {line}"


@pytest.mark.skipif(not Path(FULL).exists(), reason="no /dev/full here")
@pytest.mark.parametrize(
    "words",
    [("runs",), ("show", "RUN"), ("export", "RUN"), ("verify", "RUN"), ("--help",)],
    ids=["runs", "show", "export", "verify", "--help"],
)
def test_a_read_whose_stdout_is_full_says_so_in_one_line_and_exits_1(
    workdir: Workdir, finished: Finished, words: tuple[str, ...]
) -> None:
    args = finished.args(words)
    _writes_stdout(workdir, args)
    for mode in MODES:
        done = _full(workdir, mode, args)
        assert done.returncode == 1, f"{mode}: exit {done.returncode}\n{done.stderr}"
        # One line naming the problem: not "OSError: [Errno 28] ... --debug", no traceback.
        (line,) = done.stderr.splitlines()
        assert line.startswith(NO_SPACE), f"{mode}: {line}"
        assert "output is lost or cut short" in line
