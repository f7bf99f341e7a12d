"""A fleet's run counters add up across real processes: a ``magistrate worker`` counts
the submitted runs it executes as neither started nor resumed (the submitter counted the
start), a run paused in the worker and cancelled from another process counts there under
its graph, and its resume there counts as reopened, so started + reopened - finished,
summed over the processes, is the number of runs not ended."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime, RuntimeMetrics
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.cli.worker_functions"

PLAIN = GraphSpec(id="plain", entry_node="n", nodes=[NodeSpec(id="n", function=f"{MODULE}:double")])
#: n -> [gate] m: paused in the worker before ``m``.
GATED = GraphSpec(
    id="gated",
    entry_node="n",
    terminal_nodes=["m"],
    pause_nodes=["m"],
    nodes=[
        NodeSpec(id="n", function=f"{MODULE}:double"),
        NodeSpec(id="m", function=f"{MODULE}:double"),
    ],
    edges=[EdgeSpec(source="n", target="m")],
)


def _sample(text: str, name: str, labels: str = "") -> float:
    """The value of one sample of a Prometheus text page (0 when absent)."""
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _sum(text: str, name: str) -> float:
    """The sum of every sample of ``name`` on a Prometheus text page."""
    pattern = "^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$"
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


def _local(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def _start_worker(store_url: str) -> tuple[subprocess.Popen[str], str]:
    """A worker process with metrics on a free port; the URL it prints."""
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "runtime.cli", "worker", "--store", store_url),
            *("--allow-imports", MODULE, "--metrics-port", "0"),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    first = worker.stderr.readline().strip()
    found = re.match(r"metrics on (http://127\.0\.0\.1:\d+/metrics)$", first)
    if not found:
        worker.kill()
        worker.wait()
        raise AssertionError(f"the worker did not say where its metrics are: {first!r}")
    return worker, found.group(1)


async def test_a_fleets_counters_add_up_across_a_worker_and_the_process_that_submits(
    store_url: str,
) -> None:
    worker, url = _start_worker(store_url)
    here = CollectorRegistry()
    try:
        metrics = RuntimeMetrics(here, per_graph=True)
        async with (
            Runtime(store_url, allow_imports=[MODULE], metrics=metrics) as rt,
            httpx.AsyncClient() as client,
        ):
            plain = await rt.submit(PLAIN, input={"x": 2})
            gated = await rt.submit(GATED, input={"x": 3})

            async def worked() -> bool:
                text = (await client.get(url)).text
                ended = _sum(text, "magistrate_runs_finished_total") == 1
                return ended and _sum(text, "magistrate_run_pauses_total") == 1

            await wait_until(worked, 60)
            assert (await rt.get_state(plain)).status == "completed"
            await rt.cancel(gated)  # paused in the worker: nothing executes it, counted here
            again = await (await rt.resume(gated)).result()
            assert again.status == "paused"  # at its gate again
            approved = await rt.approve(gated, by="ops")
            assert approved is not None
            assert (await approved.result()).status == "completed"

            async def idle() -> bool:
                return _sample((await client.get(url)).text, "magistrate_runs_active") == 0

            await wait_until(idle, 30)
            text = (await client.get(url)).text
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stderr is not None:
            worker.stderr.close()
    # The worker executed two submitted runs: neither a start nor a resume there.
    assert _sum(text, "magistrate_runs_started_total") == 0
    assert _sum(text, "magistrate_run_resumes_total") == 0, text
    cancelled = {"graph": "gated", "status": "cancelled", "quality": "none"}
    assert _local(here, "magistrate_runs_finished_total", **cancelled) == 1
    assert _local(here, "magistrate_runs_reopened_total", graph="gated") == 1
    started = _local(here, "magistrate_runs_started_total")
    reopened = _local(here, "magistrate_runs_reopened_total")
    finished = _local(here, "magistrate_runs_finished_total")
    finished += _sum(text, "magistrate_runs_finished_total")
    assert (started, reopened, finished) == (2, 1, 3)  # nothing left running anywhere
