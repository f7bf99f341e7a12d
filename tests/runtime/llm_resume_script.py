"""A run killed mid-node, for tests/runtime/test_llm_resume.py.

``python -m tests.runtime.llm_resume_script DB RUN_ID`` runs :data:`GRAPH` with the
scripted model answering :data:`SCRIPT` and kills its own process (SIGKILL: no cleanup,
no flush) right after turn 3's ``LlmTurn`` is committed, before that turn's tool calls
run. The test then resumes the run from the log in its own process.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from eventstore import EventBody
from runtime import OwnershipConfig
from runtime._runtime import Runtime
from runtime.events import LlmTurn
from runtime.llm._tools import tool
from runtime.providers._base import ToolCall
from runtime.providers._scripted import ScriptedProvider, reply
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

__all__ = ["GRAPH", "KILL_AFTER_TURN", "SCRIPT", "TOOLS", "finish", "main"]

KILL_AFTER_TURN = 3


@tool
def distance(a: str, b: str) -> str:
    """Distance between two cities, in km."""
    table = {("Lisbon", "Porto"): 313, ("Porto", "Faro"): 550, ("Lisbon", "Faro"): 278}
    return str(table.get((a, b), table.get((b, a), 0)))


TOOLS = [distance]


def finish(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"summary": f"PLAN: {inputs['plan']}"}


def _call(id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


#: Five turns; turn 3 asks for two calls whose results the killed run never records.
SCRIPT = [
    reply("Checking Lisbon to Porto.", _call("r1", "distance", a="Lisbon", b="Porto")),
    reply("Checking Porto to Faro.", _call("r2", "distance", a="Porto", b="Faro")),
    reply(
        "One more leg, and a draft.",
        _call("r3", "distance", a="Lisbon", b="Faro"),
        _call("r4", "set_output", key="plan", value="draft"),
    ),
    reply("", _call("r5", "set_output", key="plan", value="Lisbon > Porto > Faro (863 km)")),
    reply("The route is planned."),
]

#: The graph names its function node by import path, so both processes allow this module.
ALLOW = "tests.runtime.llm_resume_script"

GRAPH = GraphSpec(
    id="trip",
    nodes=[
        NodeSpec(
            id="route",
            kind="llm",
            description="Plan the route.",
            tools=["distance"],
            output_keys=["plan"],
        ),
        NodeSpec(id="finish", kind="function", function="tests.runtime.llm_resume_script:finish"),
    ],
    edges=[EdgeSpec(source="route", target="finish")],
    entry_node="route",
    terminal_nodes=["finish"],
)


def _kill_after_turn(run_id: str, last_seq: int, bodies: Sequence[EventBody]) -> None:
    for body in bodies:
        if isinstance(body, LlmTurn) and body.iteration == KILL_AFTER_TURN:
            os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, run_id: str) -> None:
    provider = ScriptedProvider(SCRIPT)
    # A short lease: the killed process's claim on the run expires soon after it died.
    async with Runtime(
        db,
        provider=provider,
        tools=TOOLS,
        hooks=[_kill_after_turn],
        allow_imports=[ALLOW],
        ownership=OwnershipConfig(lease_seconds=0.2),
    ) as rt:
        handle = await rt.start(GRAPH, run_id=run_id)
        await handle.result()
    raise SystemExit("the run finished: it should have been killed after turn 3")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
