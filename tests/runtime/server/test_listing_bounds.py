"""The runs listing over real HTTP bounds a row's texts: a failed run's ``error`` and a
paused run's gated node ``description`` and ``success_criteria`` are cut to their first
500 characters (followed by "…") and named in ``shortened``; the run's detail and
``magistrate show`` give them whole."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.server import create_app
from runtime.testing import ScriptedProvider

from .support import AUTH, TOKEN, live_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

LONG_ERROR = "the ledger is on fire: " + "é" * 5000
DESCRIPTION = "Check the refund. " * 200  # 3,600 characters
CRITERIA = ["c" * 300, "d" * 300, "e" * 50]


def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"steps": 1}


def explode(inputs: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(inputs["why"])


FAILING = GraphSpec(
    id="failing",
    nodes=[NodeSpec(id="boom", kind="function", function="explode", input_keys=["why"])],
    entry_node="boom",
)


def gated(description: str, criteria: list[str]) -> GraphSpec:
    return GraphSpec(
        id="gated",
        nodes=[
            NodeSpec(id="step", kind="function", function="step"),
            NodeSpec(  # an LLM node, paused before it asks the model anything
                id="gate",
                kind="llm",
                input_keys=["ok"],
                output_keys=["answer"],
                description=description,
                success_criteria=criteria,
            ),
        ],
        edges=[EdgeSpec(source="step", target="gate")],
        entry_node="step",
        pause_nodes=["gate"],
    )


@asynccontextmanager
async def client_of(path: Path) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    functions = {"step": step, "explode": explode}
    provider = ScriptedProvider([])  # no node asks it: the gate pauses before its turn
    async with Runtime(path, functions=functions, provider=provider) as rt:
        app = create_app(rt, graphs=[FAILING], token=TOKEN)
        async with (
            live_server(app) as url,
            httpx.AsyncClient(base_url=url, timeout=30, headers=AUTH) as client,
        ):
            yield rt, client


async def _row(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    response = await client.get("/api/runs")
    assert response.status_code == 200
    rows = {r["run_id"]: r for r in response.json()["runs"]}
    row: dict[str, Any] = rows[run_id]
    return row


def _show(path: Path, run_id: str) -> dict[str, Any]:
    command = ["show", run_id, "--store", str(path), "--output", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "runtime.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


async def test_a_failed_runs_long_error_is_cut_in_its_row_and_whole_in_its_detail(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with client_of(path) as (rt, client):
        long_run = await rt.start(FAILING, input={"why": LONG_ERROR})
        short_run = await rt.start(FAILING, input={"why": "a short reason"})
        whole = (await long_run.result()).error
        assert whole is not None and LONG_ERROR in whole
        await short_run.result()

        row = await _row(client, long_run.run_id)
        assert row["status"] == "failed"
        assert row["error"] == whole[:500] + "…"
        assert row["shortened"] == ["error"]
        short = await _row(client, short_run.run_id)
        assert short["error"].endswith("a short reason") and short["shortened"] == []

        detail = (await client.get(f"/api/runs/{long_run.run_id}")).json()
        assert detail["summary"]["error"] == whole
        assert detail["summary"]["shortened"] == []
    assert _show(path, long_run.run_id)["error"] == whole


async def test_a_gated_nodes_long_texts_are_cut_in_its_row_and_whole_in_its_detail(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with client_of(path) as (rt, client):
        handle = await rt.start(gated(DESCRIPTION, CRITERIA), input={"ok": True})
        assert (await handle.result()).status == "paused"

        paused = (await _row(client, handle.run_id))["paused"]
        assert paused["description"] == DESCRIPTION[:500] + "…"
        # The first criterion fits whole, the second is cut at the room left, the third
        # is left out.
        assert paused["success_criteria"] == [CRITERIA[0], "d" * 200 + "…"]
        assert paused["shortened"] == ["description", "success_criteria"]
        assert paused["values"] == {"ok": True} and paused["values_omitted"] == []

        detail = (await client.get(f"/api/runs/{handle.run_id}")).json()
        assert detail["summary"]["paused"]["description"] == DESCRIPTION
        assert detail["summary"]["paused"]["success_criteria"] == CRITERIA
        assert detail["summary"]["paused"]["shortened"] == []
    shown = _show(path, handle.run_id)["paused"]
    assert shown["description"] == DESCRIPTION and shown["success_criteria"] == CRITERIA


async def test_texts_that_fit_are_listed_whole(tmp_path: Path) -> None:
    criteria = ["a" * 250, "b" * 250]  # 500 characters together: they fit
    async with client_of(tmp_path / "runs.db") as (rt, client):
        handle = await rt.start(gated("d" * 500, criteria), input={"ok": 1})
        await handle.result()
        paused = (await _row(client, handle.run_id))["paused"]
        assert paused["description"] == "d" * 500
        assert paused["success_criteria"] == criteria
        assert paused["shortened"] == []
