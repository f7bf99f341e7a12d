"""A draining run says so wherever a user reads it (issue 26: "bounded, visible in the
status"): while a cancelled node's abandoned attempt runs on, its owner's claim is marked
draining with the node and since when, and the run's summary, detail and report
(runtime.reads), ``magistrate runs`` / ``show`` (a subprocess) and the HTTP API (loopback)
say it; the mark goes with the claim once the attempt ends. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from runtime import Runtime
from runtime.reads import RunReader
from runtime.server import create_app
from tests.runtime.server.support import live_server
from tests.runtime.test_draining import GRAPH, Blocking

pytestmark = pytest.mark.anyio

MAGISTRATE = Path(sys.executable).with_name("magistrate")


def _cli(store: str, *args: str) -> str:
    done = subprocess.run(
        [str(MAGISTRATE), *args, "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("kind", ["thread", "async"])
async def test_a_draining_run_says_which_node_drains_and_since_when(store: str, kind: str) -> None:
    blocking = Blocking()
    before = time.time()
    async with (
        Runtime(store, functions=blocking.functions(kind)) as here,
        Runtime(store) as reader_rt,
    ):
        assert reader_rt.store is not None
        handle = await here.start(GRAPH)
        run_id = handle.run_id
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await here.cancel(run_id)
        assert (await handle.result()).status == "cancelled"
        # Marked before the result was delivered: read at once, from another runtime.
        reader = RunReader(reader_rt.store)
        summary = await reader.summary(run_id)
        assert (summary.owner, summary.ownership, summary.draining) == (
            here.worker_id,
            "claimed",
            "work",
        )
        assert summary.draining_since is not None and summary.draining_since >= before - 1
        assert (await reader.detail(run_id)).summary.draining == "work"
        assert (await reader.report(run_id)).draining == "work"

        listed = await anyio.to_thread.run_sync(_cli, store, "runs", "--output", "json")
        row = json.loads(listed)["runs"][0]
        assert (row["run_id"], row["draining"]) == (run_id, "work")
        table = await anyio.to_thread.run_sync(_cli, store, "runs")
        assert f"{here.worker_id} (draining work)" in table
        shown = await anyio.to_thread.run_sync(_cli, store, "show", run_id)
        assert "draining:  work since " in shown, shown
        assert f"owner:     {here.worker_id} (draining work)" in shown

        app = create_app(reader_rt, token="t" * 20)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            detail = (await client.get(f"/api/runs/{run_id}")).json()["summary"]
            assert (detail["owner"], detail["draining"]) == (here.worker_id, "work")
            assert detail["draining_since"] == summary.draining_since
            rows = (await client.get("/api/runs")).json()["runs"]
            assert [(r["run_id"], r["draining"]) for r in rows] == [(run_id, "work")]

            blocking.release.set()  # the attempt ends: the claim goes, and its mark
            with anyio.fail_after(30):
                while (await reader.summary(run_id)).owner is not None:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            detail = (await client.get(f"/api/runs/{run_id}")).json()["summary"]
            assert (detail["owner"], detail["draining"], detail["draining_since"]) == (
                None,
                None,
                None,
            )
        shown = await anyio.to_thread.run_sync(_cli, store, "show", run_id)
        assert "draining" not in shown


async def test_a_resume_that_waited_for_the_drain_clears_the_mark(store: str) -> None:
    blocking = Blocking()
    async with Runtime(store, functions=blocking.functions()) as here:
        assert here.store is not None
        handle = await here.start(GRAPH)
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await here.cancel(handle.run_id)
        await handle.result()
        reader = RunReader(here.store)
        assert (await reader.summary(handle.run_id)).draining == "work"
        blocking.release.set()
        resumed = await here.resume(handle.run_id)  # waits for the drain, keeps the claim
        summary = await reader.summary(handle.run_id)
        assert summary.draining is None and summary.status in ("running", "completed")
        assert (await resumed.result()).status == "completed"
