"""A run killed right after its llm_judge verifier recorded a result, for test_verifier_resume.

``python -m tests.runtime.verifier_crash_script DB RUN_ID`` runs :func:`graph` with a
scripted critic and kills its own process (SIGKILL: no cleanup) as soon as the commit
holding the ``verifier.result`` event is acknowledged, before the node reports.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from eventstore import EventBody
from runtime import EdgeSpec, GraphSpec, NodeSpec, OwnershipConfig, Runtime, ScriptedProvider
from runtime.events import VerificationRecorded
from runtime.spec import LlmJudgeVerifier

from .crashes import SHORT_LEASE

__all__ = ["FUNCTIONS", "graph", "main"]


def write(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"draft": "The kettle boils one litre in 95 seconds (lab report 42)."}


def publish(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"published": inputs["draft"]}


FUNCTIONS = {"write": write, "publish": publish}


def graph() -> GraphSpec:
    return GraphSpec(
        id="verifier-crash",
        entry_node="write",
        terminal_nodes=["publish"],
        nodes=[
            NodeSpec(id="write", function="write", output_keys=["draft"]),
            NodeSpec(
                id="check",
                kind="verifier",
                output_keys=["check_verification", "check_verification_passed"],
                verifier=LlmJudgeVerifier(
                    target_key="draft", evaluation_criteria="Sourced.", evaluator="critic"
                ),
            ),
            NodeSpec(id="publish", function="publish", output_keys=["published"]),
        ],
        edges=[
            EdgeSpec(source="write", target="check"),
            EdgeSpec(
                source="check",
                target="publish",
                condition="conditional",
                expression="check_verification_passed",
            ),
        ],
    )


def _kill_after_result(run_id: str, seq: int, bodies: Sequence[EventBody]) -> None:
    if any(isinstance(body, VerificationRecorded) for body in bodies):
        os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, run_id: str) -> None:
    critic = ScriptedProvider(['{"score": 0.95, "reasoning": "sourced"}'], name="critic")
    async with Runtime(
        db,
        functions=FUNCTIONS,
        providers={"critic": critic},
        hooks=[_kill_after_result],
        ownership=OwnershipConfig(lease_seconds=SHORT_LEASE),
    ) as rt:
        await (await rt.start(graph(), run_id=run_id)).result()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
