"""What the command trusts: a graph read from a store imports only what the command line
allows, and a module lying in the working directory never shadows an installed one.

Every test runs the installed ``magistrate`` command in a subprocess on a real SQLite
store; the hostile modules write a marker file when they run, which the tests look for.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from runtime import GraphSpec, NodeSpec, Runtime
from tests.pgsupport import wait_until

from .conftest import MAGISTRATE, Workdir, ok

# A module a store's graph names: installed (on PYTHONPATH, not in the working directory),
# and harmful when it runs.
PAYLOAD = """
from pathlib import Path


def load(inputs):
    return {"draft": "hello"}


def act(inputs):
    Path(__file__).with_name("pwned").write_text("act ran")
    return {"sent": "yes"}
"""

EVIL_GRAPH = """
id: evil
entry_node: load
pause_nodes: [act]
nodes:
  - {id: load, function: "payload:load", output_keys: [draft]}
  - {id: act, function: "payload:act", input_keys: [draft], output_keys: [sent]}
edges:
  - {source: load, target: act}
"""

# Modules named like installed packages the command imports, lying in the working directory.
HOSTILE = """
from pathlib import Path

Path(__file__).with_name("hostile-{name}-ran").write_text("imported")
raise SystemExit(97)
"""

STEPS = """
def draft(inputs):
    return {"draft": f"Dear {inputs['name']}"}


def send(inputs):
    return {"sent": inputs["draft"] + " (sent)"}
"""

LETTER = """
id: letter
entry_node: draft
pause_nodes: [send]
nodes:
  - {id: draft, function: "steps:draft", input_keys: [name], output_keys: [draft]}
  - {id: send, function: "steps:send", input_keys: [draft], output_keys: [sent]}
edges:
  - {source: draft, target: send}
"""


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    """A directory outside the working directory holding ``payload.py``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "payload.py").write_text(PAYLOAD)
    return site


def _paused_evil_run(workdir: Workdir, env: dict[str, str]) -> str:
    workdir.write("evil.yaml", EVIL_GRAPH)
    first = ok(workdir.run("run", "evil.yaml", "--output", "json", "-q", env=env), 3)
    run_id: str = json.loads(first.out)["run_id"]
    return run_id


def _status(workdir: Workdir, run_id: str) -> str:
    shown = ok(workdir.run("show", run_id, "--output", "json"))
    status: str = json.loads(shown.out)["status"]
    return status


def test_a_stored_graph_imports_nothing_on_approve_resume_or_fork(
    workdir: Workdir, payload: Path
) -> None:
    env = {"PYTHONPATH": str(payload)}
    run_id = _paused_evil_run(workdir, env)  # the file named on the command line is trusted
    marker = payload / "pwned"
    assert not marker.exists()

    # An approval is a command: recorded, the stored graph not executed here (it names the
    # module and the flag), and the run left for a process allowed to run it.
    recorded = ok(workdir.run("approve", run_id, env=env))
    assert "decision by" in recorded.out and "not executed here" in recorded.out
    assert "importing from module 'payload' is not allowed" in recorded.out
    assert "--allow-imports" in recorded.out
    assert not marker.exists(), "approve ran the stored graph's import"
    assert _status(workdir, run_id) == "running"
    for command in (["resume", run_id], ["fork", run_id, "--at", "1"]):
        refused = ok(workdir.run(*command, env=env), 2)
        assert "importing from module 'payload' is not allowed" in refused.err, refused.err
        assert "--allow-imports" in refused.err
        assert not marker.exists(), f"{command[0]} ran the stored graph's import"
    # Nothing was executed: no fork was left behind.
    listed = json.loads(ok(workdir.run("runs", "--output", "json")).out)
    assert [run["run_id"] for run in listed["runs"]] == [run_id]

    # Allowed on the command line, the approved run goes on.
    resumed = ok(
        workdir.run("resume", run_id, "--allow-imports", "payload", "--output", "json", env=env)
    )
    assert json.loads(resumed.out)["memory"]["sent"] == "yes"
    assert marker.read_text() == "act ran"


def test_the_environment_variable_allows_imports_like_the_flag(
    workdir: Workdir, payload: Path
) -> None:
    env = {"PYTHONPATH": str(payload)}
    run_id = _paused_evil_run(workdir, env)
    # The run waits at its gate: the approval is recorded, the graph not run here.
    other = ok(workdir.run("approve", run_id, env={**env, "MAGISTRATE_ALLOW_IMPORTS": "os, json"}))
    assert "not executed here" in other.out and "allowed: 'os', 'json'" in other.out
    resumed = ok(
        workdir.run("resume", run_id, "-q", env={**env, "MAGISTRATE_ALLOW_IMPORTS": "json,payload"})
    )
    assert "completed" in resumed.out
    assert (payload / "pwned").exists()


def _start_worker(cwd: Path, store: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(MAGISTRATE), "worker", "--store", store],
        cwd=cwd,
        env=Workdir(cwd).env(env),
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.anyio
async def test_a_worker_leaves_a_run_whose_imports_it_may_not_make(
    tmp_path: Path, payload: Path
) -> None:
    store = str(tmp_path / "runs.db")
    graph = GraphSpec(
        id="evil",
        nodes=[NodeSpec(id="act", function="payload:act", output_keys=["sent"])],
        edges=[],
        entry_node="act",
    )
    sys.path.insert(0, str(payload))
    try:
        async with Runtime(store, allow_imports=["payload"]) as rt:
            run_id = await rt.submit(graph)
    finally:
        sys.path.remove(str(payload))
        sys.modules.pop("payload", None)
    env = {"PYTHONPATH": str(payload), "MAGISTRATE_ALLOW_IMPORTS": "json"}
    worker = _start_worker(tmp_path, store, env)
    assert worker.stderr is not None
    seen: list[str] = []
    try:
        with anyio.fail_after(60):
            while not any("is not allowed" in line for line in seen):
                line = await anyio.to_thread.run_sync(worker.stderr.readline)
                assert line, f"the worker ended: {''.join(seen)}"
                seen.append(line)
        async with Runtime(store) as rt:

            async def recorded() -> bool:
                return bool((await rt.get_state(run_id)).unrunnable)

            await wait_until(recorded, 60)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
        worker.stderr.close()
    log = "".join(seen)
    assert f"run {run_id}: this worker cannot execute it" in log
    assert "importing from module 'payload' is not allowed" in log
    assert not (payload / "pwned").exists()
    assert code == 0
    async with Runtime(store) as rt:
        state = await rt.get_state(run_id)
        assert any("'payload' is not allowed" in reason for reason in state.unrunnable)
        assert state.status == "running"  # left for a worker that may run it


@pytest.mark.parametrize("name", ["rich", "yaml", "msgspec", "anyio"])
def test_help_never_imports_a_module_from_the_working_directory(
    workdir: Workdir, name: str
) -> None:
    workdir.write(f"{name}.py", HOSTILE.format(name=name))
    shown = ok(workdir.run("--help"))
    assert "usage: magistrate" in shown.out
    assert not (workdir.path / f"hostile-{name}-ran").exists()


def test_a_graphs_modules_come_from_the_working_directory_after_installed_ones(
    workdir: Workdir,
) -> None:
    for name in ("rich", "yaml"):
        workdir.write(f"{name}.py", HOSTILE.format(name=name))
    workdir.write("steps.py", STEPS)
    workdir.write("letter.yaml", LETTER)
    # run: the file's own modules are found in the working directory.
    first = ok(workdir.run("run", "letter.yaml", "--input", "name=Ana", "--output", "json"), 3)
    run_id = json.loads(first.out)["run_id"]
    # A store's graph: only a module --allow-imports names is looked for there.
    recorded = ok(workdir.run("approve", run_id))  # recorded, not executed here
    assert "importing from module 'steps' is not allowed" in recorded.out
    done = ok(workdir.run("resume", run_id, "--allow-imports", "steps", "--output", "json"))
    assert json.loads(done.out)["memory"]["sent"] == "Dear Ana (sent)"
    # Allowing a module named like an installed package gets the installed one.
    again = ok(
        workdir.run(
            "run", "letter.yaml", "--input", "name=Bo", "--allow-imports", "steps,yaml", "-q"
        ),
        3,
    )
    assert "paused" in again.out
    for name in ("rich", "yaml"):
        assert not (workdir.path / f"hostile-{name}-ran").exists()
