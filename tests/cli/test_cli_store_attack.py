"""``magistrate`` on store files as users meet them: a store in a directory that cannot be
written is read (``runs``, ``show``, ``verify``, ``export``) and refuses a run in one line;
``--store file:NAME`` is the file NAME says; a run the disk stops says why."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import MAGISTRATE, Result, Workdir, ok

FUNCTIONS = """
import secrets


def first(inputs):
    return {"x": 1}


def big(inputs):
    # About 1.5 MB once stored (random hex compresses by half).
    return {"blob": secrets.token_bytes(1_500_000).hex()}
"""

GRAPH = """
id: two
entry_node: first
nodes:
  - {id: first, function: "attack_funcs:first", output_keys: [x]}
  - {id: second, function: "attack_funcs:big", retry: {max_attempts: 1}}
edges:
  - {source: first, target: second}
"""

SMALL = """
id: small
entry_node: first
nodes:
  - {id: first, function: "attack_funcs:first", output_keys: [x]}
"""


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Workdir]:
    """A working directory the test may make immutable (made writable again after)."""
    work = Workdir(tmp_path)
    work.write("attack_funcs.py", FUNCTIONS)
    work.write("two.yaml", GRAPH)
    work.write("small.yaml", SMALL)
    yield work
    subprocess.run(["chattr", "-i", str(tmp_path)], check=False, capture_output=True)


def _run_ids(work: Workdir, *args: str) -> list[str]:
    """The run ids ``magistrate runs ARGS`` lists."""
    listed = json.loads(ok(work.run("runs", "--output", "json", *args)).out)
    return [row["run_id"] for row in listed["runs"]]


def _freeze(path: Path) -> None:
    """Make ``path`` immutable (root ignores modes), or skip where that is refused."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"the file system refuses chattr +i: {done.stderr.strip()}")


def test_a_store_in_a_directory_that_cannot_be_written_is_read_and_refuses_a_run(
    work: Workdir,
) -> None:
    # Every reading command failed: 'cannot open or read the event store: unable to open
    # database file' (SQLite could not make the WAL's -shm file there).
    ok(work.run("run", "small.yaml", "-q"))
    [run_id] = _run_ids(work)
    _freeze(work.path)
    listed = ok(work.run("runs"))
    assert run_id in listed.out and "completed" in listed.out
    shown = ok(work.run("show", run_id))
    assert "status:    completed" in shown.out and "chain:     verified" in shown.out
    checked = ok(work.run("verify", "--all"))
    assert checked.out.startswith("ok: 1 run") and "1 recorded head present" in checked.out
    exported = ok(work.run("export", run_id))
    assert json.loads(exported.out.splitlines()[0])["type"] == "run.started"
    refused = ok(work.run("run", "small.yaml", "-q"), 2)
    assert refused.err.strip().splitlines()[-1] == (
        f"magistrate: error: magistrate.db: cannot write to the event store: its directory "
        f"{work.path} is not writable (a store keeps its WAL files there), so it was opened "
        "for reading only"
    )
    assert sorted(p.name for p in work.path.iterdir() if p.name.startswith("magistrate")) == [
        "magistrate.db",
        "magistrate.db.heads",
    ]


def test_a_store_named_file_colon_is_that_file(work: Workdir) -> None:
    # SQLite read 'file:runs.db' as a URI and wrote runs.db, where nothing after looked.
    done = ok(work.run("run", "small.yaml", "-q", "--store", "file:runs.db"))
    assert ": completed" in done.out
    assert (work.path / "file:runs.db").is_file() and not (work.path / "runs.db").exists()
    assert len(_run_ids(work, "--store", "file:runs.db")) == 1
    checked = ok(work.run("verify", "--all", "--store", "file:runs.db"))
    assert checked.out.startswith("ok: 1 run") and "1 recorded head present" in checked.out


#: Below the store file once the big output is in it, above everything else written.
LIMIT = 1_000_000


def _limited(work: Workdir, *args: str) -> Result:
    """``magistrate ARGS`` with no file of it allowed past LIMIT bytes (Python ignores
    SIGXFSZ, so a write past it fails with EFBIG, as on a full disk)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    done = subprocess.run(
        [str(MAGISTRATE), *args],
        cwd=work.path,
        env=work.env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def test_a_run_the_disk_stops_says_why(work: Workdir) -> None:
    # It said only 'append failed: disk I/O error'.
    failed = ok(_limited(work, "run", "two.yaml", "-q"), 1)
    assert (
        "magistrate.db: append failed: disk I/O error: the file could not grow: it reached "
        f"this process's file size limit ({LIMIT} bytes)"
    ) in failed.err, failed.err
    [run_id] = _run_ids(work)
    shown = ok(work.run("show", run_id))
    assert "path:      first" in shown.out and "chain:     verified" in shown.out


def test_a_store_that_cannot_grow_on_close_says_why_and_keeps_the_run(work: Workdir) -> None:
    # The small run's commits fit in the WAL; merging them into the larger file on close
    # is refused. The warning said only 'disk I/O error'.
    ok(work.run("run", "two.yaml", "-q"))
    assert (work.path / "magistrate.db").stat().st_size > LIMIT
    done = ok(_limited(work, "run", "small.yaml", "-q"))
    assert ": completed" in done.out
    assert (
        "could not merge the WAL of magistrate.db into it on close: disk I/O error: the file "
        f"could not grow: it reached this process's file size limit ({LIMIT} bytes)"
    ) in done.err, done.err
    checked = ok(work.run("verify", "--all"))
    assert checked.out.startswith("ok: 2 runs") and "2 recorded heads present" in checked.out
