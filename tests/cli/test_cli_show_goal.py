"""``show`` prints the goal's scorecard the run recorded: whether it was met, its score,
each criterion (score, method, met) and each constraint."""

from __future__ import annotations

import json

from .conftest import Workdir, ok

GOAL_GRAPH = """
id: hours
entry_node: total
nodes:
  - {id: total, function: "hours_funcs:total", output_keys: [total_hours]}
goal:
  description: Add up the week
  success_criteria:
    - {id: total, description: The week adds up to 37.5 hours, expression: "total_hours == 37.5"}
    - {id: short, description: Under 30 hours, expression: "total_hours < 30"}
    - The summary reads well
  constraints:
    - {id: sane, description: Not negative, expression: "total_hours >= 0"}
"""


def test_show_prints_the_goal_scorecard(workdir: Workdir) -> None:
    workdir.write("hours_funcs.py", "def total(inputs):\n    return {'total_hours': 37.5}\n")
    workdir.write("hours.yaml", GOAL_GRAPH)
    ran = ok(workdir.run("run", "hours.yaml", "-q", "--output", "json"))
    run_id = json.loads(ran.out)["run_id"]
    text = ok(workdir.run("show", run_id)).out
    assert "goal:      NOT met, score 0.50" in text
    assert "           total: 1.00 (expression, met)" in text
    assert "           short: 0.00 (expression, not met)" in text
    assert "           criterion_2: - (unscored): no evaluator" in text
    assert "           sane: held: total_hours >= 0 is true" in text
