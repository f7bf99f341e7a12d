"""``magistrate worker`` stalled past its lease (SIGSTOP), its run taken over by another
worker, continued (SIGCONT) and stopped (SIGTERM) while it takes on runnable runs: it
exits holding no claim, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from runtime import GraphSpec, NodeSpec, Runtime
from tests.pgsupport import PG_URL, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HOLD = "tests.cli.holding_functions"
LATE = "tests.cli.slow_import_functions"
ALLOW = [HOLD, LATE]
LEASE = 2.0


def _graph(name: str, function: str) -> GraphSpec:
    return GraphSpec(id=name, nodes=[NodeSpec(id="n", function=function)], edges=[], entry_node="n")


def _start_worker(
    store_url: str, worker_id: str, concurrency: int, log: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime.cli",
                "worker",
                "--store",
                store_url,
                "--worker-id",
                worker_id,
                "--concurrency",
                str(concurrency),
                "--lease",
                str(LEASE),
                "--poll",
                "0.1",
                "--allow-imports",
                ",".join(ALLOW),
            ],
            cwd=ROOT,
            stderr=stderr,
            text=True,
            env={**os.environ, **env},
        )


def _left_owned(store_url: str, owner: str) -> list[str]:
    """The runs whose claim ``owner`` took and never gave up (expired or not): read from
    the store's own columns, as a release clears the owner and an expiry does not, so the
    answer does not depend on how long ago the owner exited."""
    if "://" not in store_url:
        with sqlite3.connect(store_url) as conn:
            rows = conn.execute("SELECT run_id FROM claims WHERE owner = ?", (owner,)).fetchall()
        return sorted(str(run_id) for (run_id,) in rows)
    schema = store_url.rpartition("?schema=")[2]
    with psycopg.connect(PG_URL) as conn:
        rows = conn.execute(
            f"SELECT run_id FROM {schema}.runs WHERE owner = %s", (owner,)
        ).fetchall()
    return sorted(str(run_id) for (run_id,) in rows)


async def test_a_worker_stopped_after_a_stall_and_a_takeover_exits_holding_no_claim(
    store_url: str, tmp_path: Path
) -> None:
    """The stalled worker gives its lost run up and, having room, claims the runs that
    wait meanwhile in one batch; SIGTERM comes while it takes them on one by one (the
    first one's graph imports a module that blocks until the test lets it go). Every claim
    of the batch is given up as it exits, not only those of the runs it had begun."""
    holding, importing, imported = (
        tmp_path / name for name in ("holding", "importing", "imported")
    )
    env = {
        "MAGISTRATE_TEST_HOLDING": str(holding),
        "MAGISTRATE_TEST_IMPORTING": str(importing),
        "MAGISTRATE_TEST_IMPORTED": str(imported),
    }
    workers: list[subprocess.Popen[str]] = []
    try:
        async with Runtime(store_url, allow_imports=ALLOW) as rt:
            store = rt.store
            assert store is not None

            async def owner(run_id: str) -> str | None:
                info = await store.get_run(run_id)
                assert info is not None
                return info.owner

            held = await rt.submit(_graph("held", f"{HOLD}:hold"), input={})
            stalled = _start_worker(store_url, "stalled", 10, tmp_path / "stalled.log", env)
            workers.append(stalled)

            async def in_its_node() -> bool:
                # Its node runs, and its start is committed: no append of it is in flight.
                return holding.exists() and "n" in (await rt.get_state(held)).running

            await wait_until(in_its_node, 30)
            os.kill(stalled.pid, signal.SIGSTOP)  # past its lease, in the middle of a node

            async def lease_ran_out() -> bool:
                return await owner(held) is None

            await wait_until(lease_ran_out, 30)
            # The heir has room for one run: it takes the held run over and no other.
            heir = _start_worker(store_url, "heir", 1, tmp_path / "heir.log", {})
            workers.append(heir)

            async def taken_over() -> bool:
                return await owner(held) == "heir"

            await wait_until(taken_over, 30)
            for _ in range(4):
                await rt.submit(_graph("late", f"{LATE}:late"), input={})
            os.kill(stalled.pid, signal.SIGCONT)

            async def taking_them_on() -> bool:
                return importing.exists()

            await wait_until(taking_them_on, 30)
            stalled.send_signal(signal.SIGTERM)
            imported.touch()
            code = stalled.wait(timeout=30)
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()
            worker.wait()
    log = (tmp_path / "stalled.log").read_text()
    assert code == 0, log
    assert "this process stalled" in log or "claim was lost" in log, log
    assert _left_owned(store_url, "stalled") == [], log
