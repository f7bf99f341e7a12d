"""One graph file for every front: a run submitted from an app, the command line or the
HTTP API needs none of the graph's code where it is submitted (no functions, tools,
judges or provider, nothing imported); a ``magistrate worker`` that may import them runs it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime, load_graph
from runtime.server import create_app
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until
from tests.runtime.server.support import live_server

pytestmark = pytest.mark.anyio

MAGISTRATE = [sys.executable, "-m", "runtime.cli"]
TOKEN = "submit-token-0123456789"

# Each process that imports the graph's module says so in imported.txt.
STEPS = """
import os
with open("imported.txt", "a") as f:
    f.write(f"{os.getpid()}\\n")


def greet(inputs):
    return {"greeting": f"Hello, {inputs['name']}!"}
"""

GRAPH = """
id: hello
entry_node: greet
nodes: [{id: greet, function: "steps:greet", input_keys: [name], output_keys: [greeting]}]
"""


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_submit"
    drop_schemas(prefix)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "steps.py").write_text(STEPS)
    (tmp_path / "hello.yaml").write_text(GRAPH)
    return tmp_path


def _start_worker(store_url: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MAGISTRATE, "worker", "--store", store_url, "--allow-imports", "steps"],
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(worker: subprocess.Popen[str]) -> tuple[int, str]:
    worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=30)
    finally:
        worker.kill()
        worker.wait()
    assert worker.stderr is not None
    log = worker.stderr.read()
    worker.stderr.close()
    return code, log


async def _completed(store_url: str, run_id: str) -> dict[str, Any]:
    async with Runtime(store_url) as rt:

        async def done() -> bool:
            return (await rt.get_state(run_id)).status == "completed"

        await wait_until(done, 60)
        return dict((await rt.get_state(run_id)).memory)


async def test_submit_needs_none_of_the_graphs_code(tmp_path: Path) -> None:
    graph = GraphSpec(
        id="everything",
        nodes=[
            NodeSpec(id="plain", function="not_here_at_all:f", output_keys=["a"]),
            NodeSpec(
                id="ask",
                kind="llm",
                tools=["not_here_at_all:lookup"],
                judge="not_here_at_all:judge",
                output_keys=["b"],
            ),
        ],
        edges=[EdgeSpec(source="plain", target="ask")],
        entry_node="plain",
    )
    async with Runtime(tmp_path / "runs.db") as rt:  # no provider, functions or imports
        run_id = await rt.submit(graph, input={"x": 1})
        state = await rt.get_state(run_id)
    assert (state.status, state.memory) == ("running", {"x": 1})
    assert "not_here_at_all" not in sys.modules


async def test_a_cli_submit_is_executed_by_a_worker_process(store_url: str, workdir: Path) -> None:
    submitted = await anyio.run_process(
        [
            *MAGISTRATE,
            "submit",
            "hello.yaml",
            "--input",
            "name=Ada",
            "--store",
            store_url,
            "--output",
            "json",
        ],
        cwd=workdir,
    )
    answer = json.loads(submitted.stdout)
    assert (answer["status"], answer["owner"]) == ("running", None)
    assert not (workdir / "imported.txt").exists()  # nothing of the graph was imported
    worker = _start_worker(store_url, workdir)
    try:
        memory = await _completed(store_url, answer["run_id"])
    finally:
        code, log = _stop(worker)
    assert memory["greeting"] == "Hello, Ada!"
    assert code == 0, log
    assert (workdir / "imported.txt").read_text().split() == [str(worker.pid)]


async def test_an_http_submit_is_executed_by_a_worker_process(workdir: Path) -> None:
    store = str(workdir / "runs.db")
    graph = load_graph(workdir / "hello.yaml")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with Runtime(store) as rt:  # the server holds none of the graph's code
        app = create_app(rt, graphs=[graph], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            here = await client.post(
                "/api/runs", json={"graph": "hello", "input": {"name": "Bo"}}, headers=auth
            )
            assert here.status_code == 422  # executing it here needs steps:greet
            response = await client.post(
                "/api/runs",
                json={"graph": "hello", "input": {"name": "Bo"}, "execute": "workers"},
                headers=auth,
            )
            assert response.status_code == 201, response.text
            ref = response.json()
            assert ref["action"] == "submitted"
            assert "waiting for a worker" in ref["detail"]
            worker = _start_worker(store, workdir)
            try:

                async def done() -> bool:
                    shown = (await client.get(f"/api/runs/{ref['run_id']}")).json()
                    return bool(shown["summary"]["status"] == "completed")

                await wait_until(done, 60)
                detail = (await client.get(f"/api/runs/{ref['run_id']}/state")).json()
            finally:
                code, log = _stop(worker)
    assert detail["memory"]["greeting"] == "Hello, Bo!"
    assert code == 0, log
    assert (workdir / "imported.txt").read_text().split() == [str(worker.pid)]


async def test_a_run_id_the_store_holds_already_is_refused_in_one_line(
    store_url: str, workdir: Path
) -> None:
    submit = [*MAGISTRATE, "submit", "hello.yaml", "--store", store_url, "--run-id", "order-7"]
    first = await anyio.run_process(submit, cwd=workdir)
    assert first.stdout.decode() == "run order-7: submitted, waiting for a worker\n"
    again = await anyio.run_process(submit, cwd=workdir, check=False)
    assert again.returncode == 2, again.stderr
    assert again.stderr.decode() == (
        "magistrate: error: --run-id order-7: the store holds a run with that id already\n"
    )
