"""``magistrate worker``: a real process executes runs that this process submits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import GraphSpec, NodeSpec, OwnershipConfig, RecoveryConfig, Runtime
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
GRAPH = GraphSpec(
    id="double",
    nodes=[NodeSpec(id="d", function="tests.cli.worker_functions:double")],
    edges=[],
    entry_node="d",
)
ALLOW = ["tests.cli.worker_functions"]


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


async def _claimed_by(runtime: Runtime, run_id: str, owner: str) -> None:
    """Wait until the store lists ``owner`` as the owner of ``run_id``."""
    store = runtime.store
    assert store is not None

    async def claimed() -> bool:
        info = await store.get_run(run_id)
        return info is not None and info.owner == owner

    await wait_until(claimed, 30)


async def _listing(store_url: str) -> tuple[dict[str, Any], str]:
    """``magistrate runs`` of ``store_url`` in a process of its own: the JSON page's one
    run, and the text table's row of it."""
    command = [sys.executable, "-m", "runtime.cli", "runs", "--store", store_url]
    page = json.loads((await anyio.run_process([*command, "--output", "json"], cwd=ROOT)).stdout)
    text = (await anyio.run_process(command, cwd=ROOT)).stdout.decode()
    header, row = text.splitlines()
    assert header.split()[:6] == ["run", "graph", "status", "quality", "owner", "events"]
    (run,) = page["runs"]
    return run, row


async def _shown(store_url: str, run_id: str) -> tuple[dict[str, Any], str]:
    """``magistrate show RUN`` in a process of its own: the JSON summary, and the text's
    owner line."""
    command = [sys.executable, "-m", "runtime.cli", "show", run_id, "--store", store_url]
    data = json.loads((await anyio.run_process([*command, "--output", "json"], cwd=ROOT)).stdout)
    text = (await anyio.run_process(command, cwd=ROOT)).stdout.decode()
    (line,) = [line for line in text.splitlines() if line.startswith("owner:")]
    return data, line


async def test_show_names_the_worker_holding_a_run_as_runs_does(store_url: str) -> None:
    release = anyio.Event()

    async def hold(inputs: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"held": True}

    held = GraphSpec(id="held", nodes=[NodeSpec(id="h", function="hold")], edges=[], entry_node="h")
    async with Runtime(store_url, functions={"hold": hold}) as submitter:
        run_id = await submitter.submit(held, input={})
        data, line = await _shown(store_url, run_id)
        assert (data["status"], data["owner"], data["ownership"]) == ("running", None, "waiting")
        assert line == "owner:     (waiting for a worker)"
        async with Runtime(
            store_url,
            functions={"hold": hold},
            ownership=OwnershipConfig(worker_id="worker-7"),
            recovery=RecoveryConfig(),
        ) as worker:
            await _claimed_by(submitter, run_id, "worker-7")
            data, line = await _shown(store_url, run_id)
            assert (data["owner"], data["ownership"]) == ("worker-7", "claimed")
            assert line == "owner:     worker-7"
            release.set()
            assert (await worker.result(run_id)).status == "completed"


async def test_runs_shows_a_submitted_run_waiting_for_a_worker_then_the_worker_holding_it(
    store_url: str,
) -> None:
    release = anyio.Event()

    async def hold(inputs: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"held": True}

    held = GraphSpec(id="held", nodes=[NodeSpec(id="h", function="hold")], edges=[], entry_node="h")
    async with Runtime(store_url, functions={"hold": hold}) as submitter:
        run_id = await submitter.submit(held, input={})
        run, row = await _listing(store_url)
        # Recorded as running (the log says so) but no process executes it yet.
        assert (run["run_id"], run["status"]) == (run_id, "running")
        assert (run["owner"], run["ownership"]) == (None, "waiting")
        assert row.split()[2:4] == ["running", "(waiting"] and "(waiting for a worker)" in row

        async with Runtime(
            store_url,
            functions={"hold": hold},
            ownership=OwnershipConfig(worker_id="worker-7"),
            recovery=RecoveryConfig(),
        ) as worker:
            await _claimed_by(submitter, run_id, "worker-7")
            run, row = await _listing(store_url)
            assert (run["status"], run["owner"], run["ownership"]) == (
                "running",
                "worker-7",
                "claimed",
            )
            assert row.split()[2:4] == ["running", "worker-7"]
            release.set()
            assert (await worker.result(run_id)).status == "completed"
