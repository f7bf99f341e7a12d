"""A parallel-branch run killed mid-round, for tests/runtime/test_parallel_resume.py.

``python -m tests.runtime.parallel_crash_script DB RUN_ID`` runs :func:`graph`: branches
0 and 1 answer at once, branch 2 first calls the tool ``lookup``, which here never
returns. The process kills itself (SIGKILL) as soon as the second ``branch.finished`` is
committed: branch 2's turn 1 is recorded, its tool result is not, and nothing is selected.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from eventstore import EventBody
from runtime import GraphSpec, NodeSpec, OwnershipConfig, Runtime, ScriptedProvider, ToolCall, tool
from runtime.events import BranchFinished
from runtime.spec import BranchJudgeSpec, BranchSpec, ParallelSpec
from runtime.testing import reply

from .crashes import SHORT_LEASE

__all__ = ["BRANCH2_TURN1", "graph", "main"]

#: Branch 2's first turn: a tool call whose result the killed run never records.
BRANCH2_TURN1 = reply("", ToolCall(id="look-1", name="lookup", arguments={"city": "Paris"}))


def graph() -> GraphSpec:
    return GraphSpec(
        id="parallel-crash",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                output_keys=["answer"],
                tools=["lookup"],
                parallel=ParallelSpec(
                    branches=[BranchSpec(provider=f"p{i}") for i in range(3)],
                    judge=BranchJudgeSpec(provider="judge"),
                ),
            )
        ],
    )


@tool
async def lookup(city: str) -> str:
    """Look a city up (in the killed process: never returns)."""
    await anyio.sleep_forever()
    return city


def _answer(text: str) -> ScriptedProvider:
    from runtime.testing import tool_call

    return ScriptedProvider([reply("", tool_call("set_output", key="answer", value=text)), text])


def _kill_at_second_finish() -> Any:
    finished: list[int] = []

    def hook(run_id: str, seq: int, bodies: Sequence[EventBody]) -> None:
        finished.extend(b.branch for b in bodies if isinstance(b, BranchFinished))
        if len(finished) >= 2:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


async def main(db: str, run_id: str) -> None:
    providers = {
        "p0": _answer("Lyon"),
        "p1": _answer("Paris"),
        "p2": ScriptedProvider([BRANCH2_TURN1]),
        "judge": ScriptedProvider(["2"]),
    }
    async with Runtime(
        db,
        provider=ScriptedProvider([]),
        providers=providers,
        tools=[lookup],
        hooks=[_kill_at_second_finish()],
        ownership=OwnershipConfig(lease_seconds=SHORT_LEASE),
    ) as rt:
        await (await rt.start(graph(), run_id=run_id)).result()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
