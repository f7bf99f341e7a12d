"""``magistrate worker --metrics-port``: a real worker process on PostgreSQL publishes the
runs it executes, a failed one included, on its own ``/metrics`` over loopback."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime import GraphSpec, NodeSpec, RetryPolicy, Runtime
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.cli.worker_functions"


def _graph(function: str) -> GraphSpec:
    return GraphSpec(
        id=function,
        nodes=[
            NodeSpec(id="n", function=f"{MODULE}:{function}", retry=RetryPolicy(max_attempts=1))
        ],
        edges=[],
        entry_node="n",
    )


@pytest.fixture
def store_url() -> Iterator[str]:
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_cli"
    drop_schemas(prefix)


def _sample(text: str, name: str, labels: str = "") -> float:
    """The value of one sample of a Prometheus text page (0 when absent)."""
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _start_worker(store_url: str) -> tuple[subprocess.Popen[str], str]:
    """A worker process with metrics on a free port; the URL it prints."""
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime.cli",
            "worker",
            "--store",
            store_url,
            "--allow-imports",
            MODULE,
            "--metrics-port",
            "0",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    first = worker.stderr.readline()
    found = re.match(r"metrics on (http://127\.0\.0\.1:\d+/metrics)$", first.strip())
    if not found:
        worker.kill()
        worker.wait()
        raise AssertionError(f"the worker did not say where its metrics are: {first!r}")
    return worker, found.group(1)


async def test_a_worker_publishes_the_runs_it_executes_a_failed_one_included(
    store_url: str,
) -> None:
    worker, url = _start_worker(store_url)
    try:
        async with Runtime(store_url, allow_imports=[MODULE]) as rt:
            failing = await rt.submit(_graph("explode"), input={})
            passing = await rt.submit(_graph("double"), input={"x": 2})

            async def both_ended() -> bool:
                states = [await rt.get_state(run_id) for run_id in (failing, passing)]
                return all(state.status in ("completed", "failed") for state in states)

            await wait_until(both_ended, 60)
            assert (await rt.get_state(failing)).status == "failed"
        async with httpx.AsyncClient() as client:

            async def counted() -> bool:
                text = (await client.get(url)).text
                return _sample(text, "magistrate_runs_active") == 0

            await wait_until(counted, 30)
            text = (await client.get(url)).text
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stderr is not None:
            worker.stderr.close()
    failed = _sample(text, "magistrate_runs_finished_total", 'quality="failed",status="failed"')
    completed = _sample(
        text, "magistrate_runs_finished_total", 'quality="clean",status="completed"'
    )
    assert (failed, completed) == (1.0, 1.0), text
    assert _sample(text, "magistrate_runs_active") == 0
    assert _sample(text, "magistrate_eventstore_events_total") > 0
