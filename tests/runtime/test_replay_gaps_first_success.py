"""A ``first_success`` round of an LLM node's parallel branches picks the branch that
finished first. When the slower branch has the lower index, a replay that let the
branches finish as they come would pick it; the replay serves the recorded finish order
instead, so the run replays equal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from eventstore import EventBody
from runtime import GraphSpec, LlmRequest, LlmResponse, NodeSpec, Runtime, ScriptedProvider
from runtime.events import BranchesSelected, BranchFinished
from runtime.spec import BranchSpec, ParallelSpec
from runtime.testing import reply, tool_call

from .replay_graphs import Failing, offline

pytestmark = pytest.mark.anyio


def answering(text: str) -> ScriptedProvider:
    return ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value=text)), reply(text)]
    )


class _After:
    """A branch model that answers only once ``go`` is set."""

    def __init__(self, inner: ScriptedProvider, go: anyio.Event) -> None:
        self.name, self.inner, self.go = inner.name, inner, go

    async def complete(self, request: LlmRequest) -> LlmResponse:
        await self.go.wait()
        return await self.inner.complete(request)


def graph(branches: int) -> GraphSpec:
    parallel = ParallelSpec(
        branches=[BranchSpec(label=f"b{i}", provider=f"p{i}") for i in range(branches)],
        strategy="first_success",
    )
    node = NodeSpec(id="answer", kind="llm", output_keys=["answer"], parallel=parallel)
    return GraphSpec(id="first", entry_node="answer", nodes=[node])


async def test_a_first_success_round_whose_slower_branch_has_the_lower_index_replays_equal(
    tmp_path: Path,
) -> None:
    # Branch 0 answers only once branch 2 has finished, branch 1 once branch 0 has: the
    # recorded finish order is 2, 0, 1, and branch 2 wins.
    finished = {i: anyio.Event() for i in range(3)}

    def note_finishes(run_id: str, last: int, bodies: Sequence[EventBody]) -> None:
        for body in bodies:
            if isinstance(body, BranchFinished):
                finished[body.branch].set()

    providers = {
        "p0": _After(answering("Lyon"), finished[2]),
        "p1": _After(answering("Nice"), finished[0]),
        "p2": answering("Paris"),
    }
    db = tmp_path / "run.db"
    async with Runtime(
        db, provider=ScriptedProvider([]), providers=providers, hooks=[note_finishes]
    ) as rt:
        result = await (await rt.start(graph(3))).result()
        bodies = [e.body for e in await rt.read_events(result.run_id)]
    assert (result.status, result.memory) == ("completed", {"answer": "Paris"})
    assert [b.branch for b in bodies if isinstance(b, BranchFinished)] == [2, 0, 1]
    [selected] = [b for b in bodies if isinstance(b, BranchesSelected)]
    assert selected.winner == 2

    async with offline(db, Failing()) as rt:
        for _ in range(5):  # the order is the record's, not the scheduler's
            report = await rt.replay(result.run_id)
            assert report.equal, report.summary()
            assert report.model_calls == 6
        # Today's node has two branches: the recorded winner is gone, and that shows.
        fewer = await rt.replay(result.run_id, graph(2))
    assert not fewer.equal
    assert [d.kind for d in fewer.divergences][:1] == ["branch.turn"], fewer.summary()
