"""A fork made while a ``magistrate worker`` runs on the same SQLite file: the fork's copy
ends running, so it would be runnable to the worker the moment it is written; its creator
claims it in the same transaction, so it runs once, in its creator, which reports success
(the CLI's exit 0, the API's 201), and no process counts it live after it ended."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from runtime import Runtime, RuntimeMetrics, load_graph
from runtime.events import EdgeTaken
from runtime.server import create_app
from tests.pgsupport import wait_until
from tests.runtime.server.support import live_server

pytestmark = pytest.mark.anyio

MAGISTRATE = [sys.executable, "-m", "runtime.cli"]
TOKEN = "fork-token-0123456789"
FORKS = 4

# Each node says which process ran it for which run (the run's tag).
STEPS = """
import os


def _mark(node, inputs):
    with open("ran.txt", "a") as f:
        f.write(f"{inputs['tag']} {node} {os.getpid()}\\n")
    return {node: True}


def a(inputs):
    return _mark("a", inputs)


def b(inputs):
    return _mark("b", inputs)


def c(inputs):
    return _mark("c", inputs)
"""

GRAPH = """
id: abc
entry_node: a
nodes:
  - {id: a, function: "steps:a", input_keys: [tag], output_keys: [a]}
  - {id: b, function: "steps:b", input_keys: [tag], output_keys: [b]}
  - {id: c, function: "steps:c", input_keys: [tag], output_keys: [c]}
edges: [{source: a, target: b}, {source: b, target: c}]
"""


def _sample(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _ran(workdir: Path) -> list[tuple[str, str, int]]:
    lines = (workdir / "ran.txt").read_text().split("\n")
    return [(tag, node, int(pid)) for tag, node, pid in (line.split() for line in lines if line)]


def _start_worker(store: str, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    worker = subprocess.Popen(
        [
            *MAGISTRATE,
            "worker",
            "--store",
            store,
            "--allow-imports",
            "steps",
            "--metrics-port",
            "0",
        ],
        cwd=cwd,
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


def _fork(store: str, cwd: Path, run_id: str, at: int, tag: str) -> tuple[int, str, int]:
    fork = subprocess.Popen(
        [
            *MAGISTRATE,
            "fork",
            run_id,
            "--at",
            str(at),
            "--input",
            f"tag={tag}",
            "--store",
            store,
            "--allow-imports",
            "steps",
            "--output",
            "json",
            "-q",
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = fork.communicate(timeout=60)
    assert fork.returncode == 0, err
    return fork.returncode, out, fork.pid


def _run_source(store: str, cwd: Path) -> str:
    ran = subprocess.run(
        [
            *MAGISTRATE,
            "run",
            "abc.yaml",
            "--input",
            "tag=source",
            "--store",
            store,
            "-q",
            "--output",
            "json",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    run_id: str = json.loads(ran.stdout)["run_id"]
    return run_id


async def test_a_fork_runs_once_in_its_creator_while_a_worker_runs_on_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the server below finds steps.py and writes ran.txt
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "steps.py").write_text(STEPS)
    (tmp_path / "abc.yaml").write_text(GRAPH)
    store = str(tmp_path / "runs.db")
    source = _run_source(store, tmp_path)
    async with Runtime(store) as rt:
        events = await rt.read_events(source)
    at = next(e.seq for e in events if isinstance(e.body, EdgeTaken))  # after a, mid-run
    worker, metrics_url = _start_worker(store, tmp_path)
    try:
        # From the command line: each fork's result is printed, exit 0.
        forked: dict[str, int] = {}
        for i in range(FORKS):
            code, out, pid = _fork(store, tmp_path, source, at, f"cli{i}")
            result = json.loads(out)
            assert (code, result["status"]) == (0, "completed")
            forked[f"cli{i}"] = pid
        # Over HTTP, from a server that counts its live runs.
        registry = CollectorRegistry()
        async with Runtime(store, allow_imports=["steps"], metrics=RuntimeMetrics(registry)) as rt:
            app = create_app(rt, graphs=[load_graph(tmp_path / "abc.yaml")], token=TOKEN)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
                for i in range(FORKS):
                    response = await client.post(
                        f"/api/runs/{source}/fork",
                        json={"at_seq": at, "input": {"tag": f"http{i}"}},
                        headers=auth,
                    )
                    assert response.status_code == 201, response.text
                    run_id = response.json()["run_id"]

                    async def ended(run_id: str = run_id) -> bool:
                        return (await rt.get_state(run_id)).status == "completed"

                    await wait_until(ended, 30)

                async def none_live() -> bool:
                    return registry.get_sample_value("magistrate_runs_active") == 0

                await wait_until(none_live, 30)
        async with httpx.AsyncClient() as client:
            worker_metrics = (await client.get(metrics_url)).text
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        assert worker.stderr is not None
        log = worker.stderr.read()
        worker.stderr.close()
    assert _sample(worker_metrics, "magistrate_runs_active") == 0
    marks = _ran(tmp_path)
    for i in range(FORKS):
        # Copied up to a's edge: b and c ran once, in the fork command's process.
        assert [(n, p) for t, n, p in marks if t == f"cli{i}"] == [
            ("b", forked[f"cli{i}"]),
            ("c", forked[f"cli{i}"]),
        ]
        assert [(n, p) for t, n, p in marks if t == f"http{i}"] == [
            ("b", os.getpid()),
            ("c", os.getpid()),
        ]
    assert worker.pid not in {p for _, _, p in marks}, log
