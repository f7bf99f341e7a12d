"""``magistrate`` on a store that cannot grow (a full disk, a file size limit): the error
that stopped the run is the one shown, with how to continue; a run that committed
completes; reads still work; nothing committed is lost and the chain stays verified.

The limit is ``RLIMIT_FSIZE`` on the ``magistrate`` process (Python ignores ``SIGXFSZ``,
so a write past it fails with EFBIG, as on a full disk)."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

from .conftest import MAGISTRATE, Result, Workdir, ok

FUNCTIONS = """
import secrets


def big(inputs):
    # About 1.5 MB once stored (random hex compresses by half).
    return {"blob": secrets.token_bytes(1_500_000).hex()}


def small(inputs):
    return {"ok": True}
"""

BIG = """
id: big
entry_node: first
nodes:
  - {id: first, function: "size_funcs:small", retry: {max_attempts: 1}}
  - {id: second, function: "size_funcs:big", retry: {max_attempts: 1}}
edges:
  - {source: first, target: second}
"""

SMALL = """
id: small
entry_node: only
nodes:
  - {id: only, function: "size_funcs:small"}
"""

#: Below the store file once the big run is in it, above everything else written.
LIMIT = 1_000_000


def _limited(work: Workdir, *args: str) -> Result:
    """``magistrate ARGS`` with no file of it allowed past LIMIT bytes."""

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


def _setup(tmp_path: Path) -> Workdir:
    work = Workdir(tmp_path)
    work.write("size_funcs.py", FUNCTIONS)
    work.write("big.yaml", BIG)
    work.write("small.yaml", SMALL)
    return work


def test_a_run_that_commits_completes_when_the_store_file_cannot_grow_on_close(
    tmp_path: Path,
) -> None:
    work = _setup(tmp_path)
    ok(work.run("run", "big.yaml", "-q"))
    assert (tmp_path / "magistrate.db").stat().st_size > LIMIT
    # The small run's events fit in the WAL, but merging them into the (larger) database
    # file on close is refused: they stay committed in the WAL, and the run completed.
    done = ok(_limited(work, "run", "small.yaml", "-q"))
    assert ": completed" in done.out
    listed = ok(_limited(work, "runs"))
    assert "small" in listed.out and "big" in listed.out
    checked = ok(_limited(work, "verify", "--all"))
    assert checked.out.startswith("ok: 2 runs") and "2 recorded heads present" in checked.out
    # With room again, the WAL is merged and nothing was lost.
    assert ok(work.run("verify", "--all")).out == checked.out


def test_a_run_whose_append_the_store_refuses_says_so_and_resumes_later(
    tmp_path: Path,
) -> None:
    work = _setup(tmp_path)
    failed = ok(_limited(work, "run", "big.yaml", "-q"), 1)
    assert "StoreError" in failed.err and "append failed" in failed.err, failed.err
    [run_id] = [line.split()[0] for line in work.run("runs").out.splitlines()[1:]]
    assert f"'magistrate resume {run_id}' continues it" in failed.err, failed.err
    shown = ok(work.run("show", run_id))
    assert "status:    running" in shown.out and "path:      first" in shown.out
    ok(work.run("verify", "--all"))
    # Room again: the run continues from its last commit; 'first' does not run again.
    resumed = ok(work.run("resume", run_id, "-q", "--allow-imports", "size_funcs"))
    assert ": completed" in resumed.out
    shown = ok(work.run("show", run_id))
    assert "path:      first -> second" in shown.out
    assert ok(work.run("verify", "--all")).out.startswith("ok: 1 run")
