"""A person who presses Ctrl-C, or whose terminal pipe goes away: ``run`` and ``resume``
interrupted by SIGINT leave the run cancelled and resumable and say the command that
continues it; a run whose stderr reader went away (``magistrate run G 2>&1 | head``) goes
on to its end instead of stopping half-way."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

from .conftest import MAGISTRATE, Workdir, ok

HOLD = """
import pathlib

import anyio


async def hold(inputs):
    # Runs until the test lets it go (a file appears), within a minute.
    with anyio.fail_after(60):
        while not pathlib.Path("release").exists():
            await anyio.sleep(0.01)
    return {"done": True}
"""

GRAPH = """
id: hold
entry_node: h
nodes:
  - {id: h, function: "attack_funcs:hold", output_keys: [done]}
"""

HINT = "continue it with: "


def _interrupted(workdir: Workdir, *args: str) -> str:
    """Run ``magistrate ARGS`` until its node starts, press Ctrl-C; the command it says
    continues the run (checked: exit 4, the run cancelled)."""
    process = workdir.popen(*args)
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while "h started" not in seen:
            assert time.monotonic() < deadline and process.poll() is None, seen
            seen += process.stderr.readline()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 4, (out, seen + err)
    assert ": cancelled" in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("magistrate: run ") and " cancelled by SIGINT" in last, err
    assert "Traceback" not in err
    return last.partition(HINT)[2]


def _words(command: str, store_url: str) -> list[str]:
    """The words of a command the CLI printed, without ``magistrate``; a PostgreSQL URL,
    which it never repeats (it may hold a password), filled in."""
    first, *words = shlex.split(command)
    assert first == "magistrate", command
    return [store_url if word == "URL" else word for word in words]


def test_ctrl_c_leaves_the_run_resumable_and_says_how(workdir: Workdir, store_url: str) -> None:
    workdir.write("attack_funcs.py", HOLD)
    workdir.write("hold.yaml", GRAPH)
    command = _interrupted(workdir, "run", "hold.yaml", "--store", store_url)
    words = _words(command, store_url)
    assert words[0] == "resume" and "--allow-imports" in words, command
    run_id = words[1]
    # The resume it names is interrupted too, and says the same.
    again = _interrupted(workdir, *words)
    assert _words(again, store_url) == words
    (workdir.path / "release").write_text("")
    done = json.loads(ok(workdir.run(*words, "-q", "--output", "json")).out)
    assert (done["run_id"], done["status"], done["memory"]["done"]) == (run_id, "completed", True)
    shown = json.loads(
        ok(workdir.run("show", run_id, "--store", store_url, "--output", "json")).out
    )
    assert shown["chain"]["ok"] and shown["status"] == "completed"


def test_a_run_whose_stderr_reader_went_away_goes_on_to_its_end(
    workdir: Workdir, store_url: str
) -> None:
    # ``magistrate run G 2>&1 | head -1``: the progress lines meet a closed pipe.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [
                str(MAGISTRATE),
                *("run", "graph.yaml", "--input", "text=refund please"),
                *("--provider", "scripted:script.yaml", "--store", store_url),
            ],
            cwd=workdir.path,
            env=workdir.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=write,
            text=True,
            timeout=45,
        )
    finally:
        os.close(write)
    # The result still goes to stdout, and the exit code says the run paused at its gate.
    assert done.returncode == 3, done.stdout
    assert ": paused after 2 steps" in done.stdout and "category: billing" in done.stdout
    runs = json.loads(ok(workdir.run("runs", "--store", store_url, "--output", "json")).out)
    assert [(r["status"], r["ownership"]) for r in runs["runs"]] == [("paused", "unclaimed")]
