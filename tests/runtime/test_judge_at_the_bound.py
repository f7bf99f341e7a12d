"""A judge's RETRY on a node's last allowed turn: the bound ends the node (ACCEPT with its
outputs set, the seed's "terminates regardless of the verdict"), and the RETRY it overrules
is recorded before that ACCEPT, which names it; a replay of the run serves that recorded
answer and comes out equal."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import NodeSpec, Runtime
from runtime.events import Verdict
from runtime.testing import ScriptedProvider, linear_graph, reply, tool_call

pytestmark = pytest.mark.anyio

REJECTED = '{"verdict": "RETRY", "feedback": "the answer is wrong"}'


async def test_the_retry_the_bound_overrules_is_recorded(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="wrong")), reply("done")],
        judge=[REJECTED],
    )
    node = NodeSpec(
        id="n",
        kind="llm",
        output_keys=["answer"],
        success_criteria=["the answer is right"],
        max_iterations=2,
    )
    async with Runtime(tmp_path / "runs.db", provider=provider) as rt:
        result = await (await rt.start(linear_graph([node]))).result()
        assert result.status == "completed" and result.memory == {"answer": "wrong"}
        verdicts = [e.body for e in await rt.read_events(result.run_id) if type(e.body) is Verdict]
        last_two = [(v.iteration, v.level, v.action) for v in verdicts[-2:]]
        assert last_two == [(2, "quality", "retry"), (2, "max_iterations", "accept")]
        assert verdicts[-2].feedback == "the answer is wrong"
        assert verdicts[-1].feedback.endswith("It overrules the quality RETRY of this turn.")
        replayed = await rt.replay(result.run_id)
        assert replayed.equal, replayed
