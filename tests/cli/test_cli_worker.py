"""``magistrate worker``: a real process executes runs that this process submits."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import GraphSpec, NodeSpec, Runtime
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
GRAPH = GraphSpec(
    id="double",
    nodes=[NodeSpec(id="d", function="tests.cli.worker_functions:double")],
    edges=[],
    entry_node="d",
)
ALLOW = ["tests.cli.worker_functions"]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_cli"
    drop_schemas(prefix)


def _start_worker(store_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.cli",
            "worker",
            "--store",
            store_url,
            "--concurrency",
            "3",
            "--allow-imports",
            ALLOW[0],
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_worker_process_runs_submitted_runs_until_stopped(store_url: str) -> None:
    async with Runtime(store_url, allow_imports=ALLOW) as rt:
        run_ids = [await rt.submit(GRAPH, input={"x": i}) for i in range(5)]
        worker = _start_worker(store_url)
        try:

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
    assert results == [0, 2, 4, 6, 8]
    assert code == 0 and "ready" in log
