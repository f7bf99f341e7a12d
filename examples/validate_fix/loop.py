"""The graph, its three functions and one offline run."""

from __future__ import annotations

import os
from typing import Any, Final

from runtime import EdgeSpec, Goal, GraphSpec, MemoryKey, NodeSpec, RunResult, Runtime
from runtime.spec import Constraint, JsonPathAssertion, JsonPathVerifier, SuccessCriterion

__all__ = ["FUNCTIONS", "TIMESHEET", "build_graph", "fix", "parse", "run_loop", "summarise"]

#: A week as typed by hand: Tuesday has a typo (75 for 7.5), Thursday a stray minus.
TIMESHEET: Final = "Mon 7.5\nTue 75\nWed 7.5\nThu -7.5\nFri 7.5"


def parse(inputs: dict[str, Any]) -> dict[str, Any]:
    entries = []
    for line in str(inputs["timesheet"]).splitlines():
        day, _, hours = line.partition(" ")
        entries.append({"day": day, "hours": float(hours)})
    return {"timesheet_data": {"entries": entries}}


def fix(inputs: dict[str, Any]) -> dict[str, Any]:
    """Repair the first entry outside 0..12: a sign typo, or a missing decimal point."""
    data = inputs["timesheet_data"]
    entries = [dict(e) for e in data["entries"]]
    for entry in entries:
        hours = entry["hours"]
        if 0 <= hours <= 12:
            continue
        repaired = abs(hours) if hours < 0 else hours / 10
        note = f"{entry['day']}: {hours:g} -> {repaired:g}"
        entry["hours"] = repaired
        return {"timesheet_data": {"entries": entries}, "fixes": note}
    return {"timesheet_data": {"entries": entries}, "fixes": "nothing to fix"}


def summarise(inputs: dict[str, Any]) -> dict[str, Any]:
    total = sum(e["hours"] for e in inputs["timesheet_data"]["entries"])
    return {"total_hours": total}


FUNCTIONS: Final = {"parse": parse, "fix": fix, "summarise": summarise}

GOAL: Final = Goal(
    description="Turn a hand-typed timesheet into a valid weekly total.",
    success_criteria=[
        SuccessCriterion(
            id="total",
            description="The week adds up to 37.5 hours",
            expression="total_hours == 37.5",
        ),
        SuccessCriterion(
            id="few_fixes",
            description="At most two repairs were needed",
            expression="len(fixes) <= 2",
        ),
    ],
    constraints=[
        Constraint(
            id="valid",
            description="The timesheet that was summed passed validation",
            expression="validate_verification_passed",
        )
    ],
)


def build_graph(*, max_steps: int = 20) -> GraphSpec:
    return GraphSpec(
        id="validate_fix",
        goal=GOAL,
        entry_node="parse",
        terminal_nodes=["summarise"],
        max_steps=max_steps,
        memory=[MemoryKey(name="fixes", reducer="append")],
        nodes=[
            NodeSpec(id="parse", function="parse", output_keys=["timesheet_data"]),
            NodeSpec(
                id="validate",
                kind="verifier",
                input_keys=["timesheet_data"],
                output_keys=["validate_verification", "validate_verification_passed"],
                verifier=JsonPathVerifier(
                    target_key="timesheet_data",
                    path="$.entries[?@.hours < 0 || @.hours > 12]",
                    assertion=JsonPathAssertion(op="not_exists"),
                ),
            ),
            NodeSpec(id="fix", function="fix", output_keys=["timesheet_data", "fixes"]),
            NodeSpec(id="summarise", function="summarise", output_keys=["total_hours"]),
        ],
        edges=[
            EdgeSpec(source="parse", target="validate"),
            EdgeSpec(
                source="validate",
                target="summarise",
                condition="conditional",
                expression="validate_verification_passed",
            ),
            EdgeSpec(source="validate", target="fix", condition="always"),
            EdgeSpec(source="fix", target="validate"),
        ],
    )


async def run_loop(db_path: str | os.PathLike[str] | None = None) -> RunResult:
    async with Runtime(db_path, functions=FUNCTIONS) as rt:
        handle = await rt.start(build_graph(), input={"timesheet": TIMESHEET})
        return await handle.result()
