"""A tool call inside a parallel branch of an LLM node is bounded by the node's
``tool_timeout``, as a call of the node itself is: past it, that branch fails and the
others go on."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from runtime import GraphSpec, NodeSpec, Runtime, ScriptedProvider, TimeoutConfig
from runtime.events import BranchesSelected, BranchFinished, NodeFailed
from runtime.llm._tools import tool
from runtime.spec import BranchSpec, ParallelSpec
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio


@tool
async def hang(query: str) -> str:
    """Wait for an answer that never comes."""
    await anyio.sleep_forever()
    return "never"


def graph(branches: int) -> GraphSpec:
    return GraphSpec(
        id="bounded",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                output_keys=["answer"],
                tools=["hang"],
                tool_timeout=0.2,
                parallel=ParallelSpec(
                    branches=[BranchSpec(label=f"b{i}", provider=f"p{i}") for i in range(branches)],
                    strategy="first_success",
                ),
            )
        ],
    )


def hanging() -> ScriptedProvider:
    return ScriptedProvider([reply("", tool_call("hang", query="x")), reply("unreachable")])


def answering() -> ScriptedProvider:
    return ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="ok")), reply("done")]
    )


# The node's own limit is far above the tool's: only the tool's bound can end the branch.
TIMEOUTS = TimeoutConfig(node=20.0)


async def test_a_branch_whose_tool_times_out_fails_and_the_other_branch_wins(
    tmp_path: Path,
) -> None:
    providers = {"p0": hanging(), "p1": answering()}
    async with Runtime(
        tmp_path / "run.db",
        provider=ScriptedProvider([]),
        providers=providers,
        tools=[hang],
        timeouts=TIMEOUTS,
    ) as rt:
        result = await (await rt.start(graph(2))).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
        report = await rt.replay(result.run_id)

    assert (result.status, result.memory) == ("completed", {"answer": "ok"})
    finished = {b.label: b for b in bodies if isinstance(b, BranchFinished)}
    assert finished["b1"].ok
    assert not finished["b0"].ok
    assert (finished["b0"].error or "").startswith("ToolTimeoutError: tool 'hang'")
    selected = next(b for b in bodies if isinstance(b, BranchesSelected))
    assert (selected.label, selected.candidates) == ("b1", [1])
    assert report.equal, report.summary()


async def test_a_round_whose_every_branch_times_out_fails_the_node_naming_the_timeout(
    tmp_path: Path,
) -> None:
    async with Runtime(
        tmp_path / "run.db",
        provider=ScriptedProvider([]),
        providers={"p0": hanging(), "p1": hanging()},
        tools=[hang],
        timeouts=TIMEOUTS,
    ) as rt:
        result = await (await rt.start(graph(2))).result()
        report = await rt.replay(result.run_id)
        bodies = [e.body for e in await rt.read_events(result.run_id)]

    assert result.status == "failed"
    failure = next(b for b in bodies if isinstance(b, NodeFailed))
    assert failure.error_type == "BranchesFailed"
    assert "b0: ToolTimeoutError" in failure.error
    assert "b1: ToolTimeoutError" in failure.error
    assert report.equal, report.summary()
