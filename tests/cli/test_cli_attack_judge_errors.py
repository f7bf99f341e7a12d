"""What ``magistrate run`` shows of a judge that failed: the run it made "degraded" (exit
1) says why as it goes, not a plain ACCEPT."""

from __future__ import annotations

from .conftest import Workdir

GRAPH = """
id: judged
entry_node: answer
nodes:
  - id: answer
    kind: llm
    output_keys: [answer]
    success_criteria: [the answer is specific]
"""

SCRIPT = """
turns:
  - tool_calls: [{name: set_output, arguments: {key: answer, value: "42"}}]
  - "done"
judge:
  - {error: "the judge model is down", status: 503}
  - {error: "the judge model is down", status: 503}
  - {error: "the judge model is down", status: 503}
"""


def test_run_shows_the_judge_failure_behind_an_accept(workdir: Workdir) -> None:
    workdir.write("judged.yaml", GRAPH)
    workdir.write("judge_down.yaml", SCRIPT)
    done = workdir.run("run", "judged.yaml", "--provider", "scripted:judge_down.yaml")
    assert done.code == 1, done.err
    assert "quality degraded" in done.out
    [accept] = [line for line in done.err.splitlines() if "ACCEPT" in line]
    assert "(judge error: quality check failed" in accept
    assert "the judge model is down" in accept
