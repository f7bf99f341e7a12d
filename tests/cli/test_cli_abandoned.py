"""``magistrate`` exits with the run's code when a node's thread never returns."""

from __future__ import annotations

from .conftest import Workdir, ok

HANGS = """
import time


def hang(inputs):
    time.sleep(3600)
"""

GRAPH = """
id: hangs
entry_node: h
nodes:
  - {id: h, function: "hang_funcs:hang", timeout: 0.5, retry: {max_attempts: 1}}
"""


def test_run_of_a_graph_whose_sync_node_hangs_prints_its_result_and_exits(
    workdir: Workdir,
) -> None:
    workdir.write("hang_funcs.py", HANGS)
    workdir.write("hangs.yaml", GRAPH)
    # The subprocess timeout only detects a process that never exits.
    done = ok(workdir.run("run", "hangs.yaml", "-q", timeout=60), 1)
    assert ": failed" in done.out
    assert "NodeTimeoutError: node 'h' did not finish within 0.5 s" in done.out
