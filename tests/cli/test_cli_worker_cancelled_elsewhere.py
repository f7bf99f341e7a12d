"""A run that a worker executes, cancelled from another process (``magistrate cancel``, or
an app's runtime): the worker counts it as cancelled on its ``/metrics``, once, and the
process that cancelled it does not (a fleet's sum counts it once)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry

from runtime import GraphSpec, NodeSpec, OwnershipConfig, RecoveryConfig, Runtime, RuntimeMetrics
from tests.pgsupport import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.cli.holding_functions"
HELD = GraphSpec(
    id="held", nodes=[NodeSpec(id="h", function=f"{MODULE}:hold")], edges=[], entry_node="h"
)
CANCELLED = {"status": "cancelled", "quality": "none"}


def _sample(text: str, name: str, labels: str = "") -> float:
    """The value of one sample of a Prometheus text page (0 when absent)."""
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def _cancel_from_the_command_line(store_url: str, run_id: str) -> None:
    command = [sys.executable, "-m", "runtime.cli", "cancel", run_id, "--store", store_url]
    await anyio.run_process(command, cwd=ROOT)


def _start_worker(store_url: str, log: Path, holding: Path) -> subprocess.Popen[str]:
    """A worker process with metrics on a free port (it writes their URL to ``log``)."""
    with log.open("w") as stderr:
        return subprocess.Popen(
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
            stderr=stderr,
            text=True,
            env={**os.environ, "MAGISTRATE_TEST_HOLDING": str(holding)},
        )


async def test_a_worker_counts_a_run_cancelled_from_another_process_once(
    store_url: str, tmp_path: Path
) -> None:
    holding, log = tmp_path / "holding", tmp_path / "worker.log"
    worker = _start_worker(store_url, log, holding)
    try:

        async def metrics_url() -> bool:
            return "metrics on " in log.read_text()

        await wait_until(metrics_url, 30)
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        assert found is not None
        url = found.group(1)
        registry = CollectorRegistry()
        async with (
            Runtime(store_url, allow_imports=[MODULE], metrics=RuntimeMetrics(registry)) as rt,
            httpx.AsyncClient() as client,
        ):

            async def scrape() -> str:
                return (await client.get(url)).text

            for cancel in ("command line", "app"):
                holding.unlink(missing_ok=True)
                run_id = await rt.submit(HELD, input={})

                async def in_its_node() -> bool:
                    return holding.exists()

                await wait_until(in_its_node, 30)
                if cancel == "command line":
                    await _cancel_from_the_command_line(store_url, run_id)
                else:
                    await rt.cancel(run_id, reason="from the app")
                assert (await rt.get_state(run_id)).status == "cancelled"

                async def stopped_there() -> bool:
                    return _sample(await scrape(), "magistrate_runs_active") == 0

                await wait_until(stopped_there, 30)
            text = await scrape()
        here = registry.get_sample_value("magistrate_runs_finished_total", CANCELLED)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    labels = 'quality="none",status="cancelled"'
    assert _sample(text, "magistrate_runs_finished_total", labels) == 2, text
    assert not here  # the app cancelled a run executed elsewhere: counted there


async def test_a_run_cancelled_from_the_command_line_counts_as_a_local_cancel_does(
    store_url: str,
) -> None:
    """A worker in this process, with a graph label on its metrics: one run cancelled by
    ``magistrate cancel``, one by this process (its executor's own cancel): each counted
    once, with the same labels."""
    registry = CollectorRegistry()
    entered: dict[str, anyio.Event] = {}

    async def hold(inputs: dict[str, Any]) -> dict[str, Any]:
        entered[inputs["name"]].set()
        await anyio.sleep_forever()
        return {}

    graph = GraphSpec(
        id="held", nodes=[NodeSpec(id="h", function="hold")], edges=[], entry_node="h"
    )
    async with Runtime(
        store_url,
        functions={"hold": hold},
        metrics=RuntimeMetrics(registry, per_graph=True),
        ownership=OwnershipConfig(worker_id="here"),
        recovery=RecoveryConfig(interval=0.1),
    ) as rt:
        for name in ("command line", "here"):
            entered[name] = anyio.Event()
            run_id = await rt.submit(graph, input={"name": name})
            with anyio.fail_after(30):
                await entered[name].wait()
            if name == "command line":
                await _cancel_from_the_command_line(store_url, run_id)
            else:
                await rt.cancel(run_id, reason="here")

            async def stopped() -> bool:
                return registry.get_sample_value("magistrate_runs_active") == 0

            await wait_until(stopped, 30)
            assert (await rt.get_state(run_id)).status == "cancelled"
    labels = {"graph": "held", **CANCELLED}
    assert registry.get_sample_value("magistrate_runs_finished_total", labels) == 2
