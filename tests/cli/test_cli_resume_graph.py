"""``magistrate resume RUN --graph FILE`` in a subprocess: a cancelled run moves to a new
graph file when its replay against it diverges nowhere, and is refused (exit 1, the
divergence named, nothing recorded) when it does, unless ``--force``."""

from __future__ import annotations

import json
import time

from .conftest import Workdir, ok

DEPLOY_FUNCS = """
def finish(inputs):
    return {"done": True}
"""

# The slow graph's node, now quick: not reached by the recorded run (it was cancelled in it).
QUICK = """
id: slow
entry_node: wait
nodes:
  - {id: wait, function: "deploy_funcs:finish", output_keys: [done]}
"""

# Starts elsewhere: the recorded run's first step is no longer what the graph does.
ELSEWHERE = """
id: slow
entry_node: first
nodes:
  - {id: first, function: "deploy_funcs:finish", output_keys: [done]}
  - {id: wait, function: "deploy_funcs:finish", output_keys: [done]}
edges:
  - {source: first, target: wait}
"""


def _cancelled(workdir: Workdir) -> str:
    process = workdir.popen("run", "slow.yaml")
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while "wait started" not in seen:
            assert time.monotonic() < deadline, seen
            seen += process.stderr.readline()
        run_id: str = json.loads(ok(workdir.run("runs", "--output", "json")).out)["runs"][0][
            "run_id"
        ]
        ok(workdir.run("cancel", run_id))
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    shown = json.loads(ok(workdir.run("show", run_id, "--output", "json")).out)
    assert shown["status"] == "cancelled"
    return run_id


def _events(workdir: Workdir, run_id: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in ok(workdir.run("export", run_id)).out.splitlines()]


def test_resume_with_a_graph_file_moves_a_run_its_replay_agrees_with(workdir: Workdir) -> None:
    workdir.write("deploy_funcs.py", DEPLOY_FUNCS)
    workdir.write("quick.yaml", QUICK)
    run_id = _cancelled(workdir)
    result = ok(workdir.run("resume", run_id, "--graph", "quick.yaml", "--output", "json"))
    assert json.loads(result.out)["status"] == "completed"
    moved = [e for e in _events(workdir, run_id) if e["type"] == "graph.replaced"]
    assert len(moved) == 1 and moved[0]["body"]["forced"] is False  # type: ignore[index]
    state = json.loads(ok(workdir.run("state", run_id, "--output", "json")).out)
    assert state["memory"]["done"] is True and state["graph"]["nodes"][0]["function"] == (
        "deploy_funcs:finish"
    )


def test_a_diverging_graph_file_is_refused_unless_forced(workdir: Workdir) -> None:
    workdir.write("deploy_funcs.py", DEPLOY_FUNCS)
    workdir.write("elsewhere.yaml", ELSEWHERE)
    run_id = _cancelled(workdir)
    before = _events(workdir, run_id)
    refused = ok(workdir.run("resume", run_id, "--graph", "elsewhere.yaml"), 1)
    assert "its replay against graph 'slow' diverged at seq 2 (node.started)" in refused.err
    assert "  seq 2 node.started: " in refused.err
    assert _events(workdir, run_id) == before  # nothing recorded
    assert "--force goes with --graph" in ok(workdir.run("resume", run_id, "--force"), 2).err
    forced = ok(workdir.run("resume", run_id, "--graph", "elsewhere.yaml", "--force", "-q"))
    assert forced.code == 0
    [moved] = [e for e in _events(workdir, run_id) if e["type"] == "graph.replaced"]
    assert moved["body"]["forced"] is True  # type: ignore[index]
