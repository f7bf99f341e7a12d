"""A ``magistrate worker`` whose PostgreSQL backends are terminated (as an administrator's
``pg_terminate_backend`` or a server restart does) says so in one warning line, reconnects,
and finishes every run: no traceback, no error per run."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
STEPS = 30
GRAPH = GraphSpec(
    id="steps",
    nodes=[
        NodeSpec(
            id=f"s{i}",
            function="tests.cli.worker_functions:step",
            input_keys=["x"],
            output_keys=["x"],
        )
        for i in range(STEPS)
    ],
    edges=[EdgeSpec(source=f"s{i}", target=f"s{i + 1}") for i in range(STEPS - 1)],
    entry_node="s0",
)


@pytest.fixture
def prefix() -> Iterator[str]:
    pg_url()
    name = fresh_prefix()
    yield name
    drop_schemas(name)


def _backends(application: str, *, terminate: bool = False) -> int:
    what = "pg_terminate_backend(pid)" if terminate else "*"
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count({what}) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _start_worker(store: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.cli",
            "worker",
            "--store",
            store,
            "--concurrency",
            "4",
            "--allow-imports",
            "tests.cli.worker_functions",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_terminated_backends_are_one_warning_and_the_worker_finishes_its_runs(
    prefix: str,
) -> None:
    store = f"{pg_url()}?schema={prefix}_w"
    application = f"{prefix}_worker"
    async with Runtime(store) as rt:  # submitting needs none of the graph's code
        run_ids = [await rt.submit(GRAPH, input={"x": 0}) for _ in range(4)]
        worker = _start_worker(f"{store}&application_name={application}")
        try:

            async def executing() -> bool:
                states = [await rt.get_state(run_id) for run_id in run_ids]
                return all(len(state.visits) >= 2 for state in states)

            await wait_until(executing, 60)  # every run is mid-way in the worker
            assert (
                await anyio.to_thread.run_sync(lambda: _backends(application, terminate=True)) >= 3
            )

            # Runs submitted after it are claimed and run on new connections too.
            run_ids += [await rt.submit(GRAPH, input={"x": 0}) for _ in range(2)]

            async def all_done() -> bool:
                states = [await rt.get_state(run_id) for run_id in run_ids]
                return all(state.status == "completed" for state in states)

            await wait_until(all_done, 60)
            results = [(await rt.get_state(run_id)).memory["x"] for run_id in run_ids]
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
        finally:
            worker.kill()
            worker.wait()
            assert worker.stderr is not None
            log = worker.stderr.read()
            worker.stderr.close()
    assert results == [STEPS] * 6
    assert code == 0, log
    assert "Traceback" not in log and "ERROR" not in log, log
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, log
    # The reason in parentheses is the server's (terminated while idle) or libpq's.
    assert re.fullmatch(
        r"WARNING magistrate\.eventstore: lost the connection to PostgreSQL \(.+\)"
        r"(; \d+ append\(s\) in flight were not written)?; reconnecting",
        warnings[0],
    ), warnings[0]
