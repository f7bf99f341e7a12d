"""A run's text (a node's output, an error's message) is shown in a terminal as text:
its control characters (an escape sequence, a carriage return) are written as ``\\uXXXX``,
never sent to the terminal as commands. A pipe gets the bytes unchanged."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import MAGISTRATE

HOSTILE = "A\x1b[31mRED\x1b]0;owned\x07B\rC\x9bD"
SHOWN = "A\\u001b[31mRED\\u001b]0;owned\\u0007B\\u000dC\\u009bD"

FUNCTIONS = f"""
def write(inputs):
    return {{"out": {HOSTILE!r}}}


def explode(inputs):
    raise RuntimeError({HOSTILE!r})
"""

GRAPH = """
id: hostile
entry_node: {node}
nodes:
  - {{id: {node}, function: "hostile_funcs:{node}", output_keys: [out]}}
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "hostile_funcs.py").write_text(FUNCTIONS)
    for node in ("write", "explode"):
        (tmp_path / f"{node}.yaml").write_text(GRAPH.format(node=node))
    return tmp_path


def _on_a_terminal(workdir: Path, *args: str) -> tuple[bytes, bytes, int]:
    """Run the command with stdout on a pseudo-terminal (stderr on a pipe)."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGISTRATE_")}
    process = subprocess.Popen(
        [str(MAGISTRATE), *args],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**env, "TERM": "dumb"},
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        shown += chunk
    _, errors = process.communicate(timeout=60)
    os.close(leader)
    return shown, errors, process.returncode


def test_a_value_with_escape_sequences_is_shown_escaped_on_a_terminal(workdir: Path) -> None:
    shown, _, code = _on_a_terminal(
        workdir, "run", "write.yaml", "--allow-imports", "hostile_funcs"
    )
    assert code == 0
    assert b"\x1b" not in shown and b"\x07" not in shown and "\x9b".encode() not in shown
    assert SHOWN.encode() in shown


def test_an_error_with_escape_sequences_is_shown_escaped(workdir: Path) -> None:
    shown, errors, code = _on_a_terminal(
        workdir, "run", "explode.yaml", "--allow-imports", "hostile_funcs"
    )
    assert code == 1
    for text in (shown, errors):  # the result's error line, and the progress's failure line
        assert b"\x1b" not in text and b"\x07" not in text
        assert SHOWN.encode() in text


def test_a_pipe_gets_the_run_s_json_unchanged(workdir: Path) -> None:
    done = subprocess.run(
        [
            str(MAGISTRATE),
            "run",
            "write.yaml",
            "--allow-imports",
            "hostile_funcs",
            "--output",
            "json",
        ],
        cwd=workdir,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0
    assert json.loads(done.stdout)["memory"]["out"] == HOSTILE
