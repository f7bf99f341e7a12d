"""A fork never cuts what one append recorded: a seq between a ``set_output`` result and
the output it set, between a RETRY and its feedback, or between a fan-out branch's
completion and its edge is refused, naming where that append ends; a fork there runs on
as the source did. A fork cut after an expression verifier's result (its own append)
replays equal: the verifier's rerun records the result again, once for one execution."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from eventstore import Event
from runtime import EdgeSpec, GraphSpec, NodeSpec, RunStateError, Runtime
from runtime.events import (
    EdgeTaken,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    OutputSet,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from runtime.providers import LlmRequest, LlmResponse
from runtime.spec import ExpressionVerifier, MemoryKey
from runtime.testing import ScriptedProvider, function_node, linear_graph, reply, tool_call

pytestmark = pytest.mark.anyio

PLAN = linear_graph(
    [NodeSpec(id="plan", kind="llm", output_keys=["plan"], success_criteria=["concrete"])],
    graph_id="trip",
)


def _turn(request: LlmRequest) -> LlmResponse:
    # Answers by how many turns the conversation holds, so a fork gets the source's.
    turns = sum(1 for message in request.messages if message.role == "assistant")
    if turns in (0, 2):
        value = "somewhere" if turns == 0 else "Lisbon, 3 days"
        return reply("", tool_call("set_output", key="plan", value=value))
    return reply("done")


def _judge(request: LlmRequest) -> str:
    if "Lisbon" in " ".join(str(message.content) for message in request.messages):
        return '{"verdict": "ACCEPT"}'
    return '{"verdict": "RETRY", "feedback": "be concrete"}'


def _model() -> ScriptedProvider:
    return ScriptedProvider(_turn, judge=_judge)


def _seq(events: list[Event], before: type, after: type) -> int:
    """The first seq whose event is a ``before`` followed by an ``after``."""
    return next(
        a.seq for a, b in pairwise(events) if type(a.body) is before and type(b.body) is after
    )


async def test_a_fork_between_a_set_output_result_and_its_output_is_refused(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", provider=_model()) as rt:
        source = await (await rt.start(PLAN)).result()
        assert source.status == "completed" and source.memory["plan"] == "Lisbon, 3 days"
        events = await rt.read_events(source.run_id)
        result = _seq(events, ToolResult, OutputSet)
        with pytest.raises(
            RunStateError,
            match=f"cannot fork at seq {result}: node 'plan' .* up to seq {result + 1}",
        ):
            await rt.fork(source.run_id, result)
        fork = await (await rt.fork(source.run_id, result + 1)).result()
        assert fork.status == "completed" and fork.memory == source.memory


async def test_a_fork_between_a_retry_and_its_feedback_is_refused(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", provider=_model()) as rt:
        source = await (await rt.start(PLAN)).result()
        events = await rt.read_events(source.run_id)
        retry = _seq(events, Verdict, MessageAdded)
        assert events[retry].body == MessageAdded(
            node_id="plan", role="user", content="[Judge feedback]: be concrete", kind="feedback"
        )
        with pytest.raises(RunStateError, match=f"up to seq {retry + 1}"):
            await rt.fork(source.run_id, retry)
        fork = await (await rt.fork(source.run_id, retry + 1)).result()
        assert fork.status == "completed" and fork.memory == source.memory


FAN = GraphSpec(
    id="fan",
    nodes=[function_node(n) for n in "abcd"],
    edges=[
        EdgeSpec(source="a", target="b"),
        EdgeSpec(source="a", target="c"),
        EdgeSpec(source="b", target="d"),
        EdgeSpec(source="c", target="d"),
    ],
    entry_node="a",
)
FUNCTIONS: dict[str, Any] = {
    "a": lambda inputs: {"x": 1},
    "b": lambda inputs: {"bk": 1},
    "c": lambda inputs: {"ck": 1},
    "d": lambda inputs: {"dk": 1},
}


async def test_a_fork_between_a_branch_s_completion_and_its_edge_is_refused(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        source = await (await rt.start(FAN)).result()
        events = await rt.read_events(source.run_id)
        first = next(
            e for e in events if type(e.body) is NodeCompleted and e.body.branch is not None
        )
        edge = events[first.seq]
        assert type(edge.body) is EdgeTaken and edge.body.source == first.body.node_id
        with pytest.raises(RunStateError, match=f"outgoing edge is not taken yet .*{edge.seq}"):
            await rt.fork(source.run_id, first.seq)
        fork = await (await rt.fork(source.run_id, edge.seq)).result()
        assert fork.status == "completed" and fork.memory == source.memory
        forked = await rt.get_state(fork.run_id)
        assert forked.edges_taken == (await rt.get_state(source.run_id)).edges_taken


CHECKED = GraphSpec(
    id="checked",
    nodes=[
        function_node("a", output_keys=["budget"]),
        NodeSpec(
            id="check",
            kind="verifier",
            input_keys=["budget"],
            output_keys=["check_verification", "check_verification_passed"],
            verifier=ExpressionVerifier(expression="budget <= 1000"),
        ),
        function_node("b"),
    ],
    edges=[EdgeSpec(source="a", target="check"), EdgeSpec(source="check", target="b")],
    entry_node="a",
)


async def test_a_fork_cut_after_a_verifier_result_replays_equal(tmp_path: Path) -> None:
    functions = {"a": lambda inputs: {"budget": 800}, "b": lambda inputs: {}}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        source = await (await rt.start(CHECKED)).result()
        events = await rt.read_events(source.run_id)
        result = next(e.seq for e in events if type(e.body) is VerificationRecorded)
        fork = await (await rt.fork(source.run_id, result)).result()
        assert fork.status == "completed"
        forked = await rt.read_events(fork.run_id)
        assert [type(e.body) for e in forked].count(VerificationRecorded) == 2
        report = await rt.replay(fork.run_id)
        assert report.equal, report.summary()


NOTES = GraphSpec(
    id="notes",
    nodes=[function_node("a", output_keys=["notes", "x"]), function_node("b")],
    edges=[EdgeSpec(source="a", target="b")],
    entry_node="a",
    memory=[MemoryKey(name="notes", reducer="append")],
)


async def test_a_fork_among_a_node_s_memory_writes_is_refused(tmp_path: Path) -> None:
    # Resumed from there, the node would run again and append its note a second time.
    functions = {"a": lambda inputs: {"notes": "n", "x": 1}, "b": lambda inputs: {}}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        source = await (await rt.start(NOTES)).result()
        assert source.memory == {"notes": ["n"], "x": 1}
        events = await rt.read_events(source.run_id)
        write = next(e.seq for e in events if type(e.body) is MemoryWritten)
        edge = next(e.seq for e in events if type(e.body) is EdgeTaken)
        for at in range(write, edge):
            with pytest.raises(RunStateError, match=f"cannot fork at seq {at}: node 'a' .*{edge}"):
                await rt.fork(source.run_id, at)
        for at in (write - 1, edge):
            fork = await (await rt.fork(source.run_id, at)).result()
            assert fork.memory == source.memory


async def test_a_fork_among_a_visits_opening_messages_and_its_turn_is_refused(
    tmp_path: Path,
) -> None:
    """A continuous conversation's next node opens with the transition marker and its
    inputs, recorded with its first turn: a fork between them would resume a visit that
    never shows its inputs."""
    graph = linear_graph(
        [
            NodeSpec(id="a", kind="llm", output_keys=["x"]),
            NodeSpec(id="b", kind="llm", input_keys=["x"], output_keys=["y"]),
        ]
    )

    def turn(request: LlmRequest) -> LlmResponse:
        # The first turn of each node sets its output; the next one ends it.
        last = request.messages[-1]
        if last.role == "tool":
            return reply("done")
        key = "y" if "[Inputs]" in str(last.content) else "x"
        return reply("", tool_call("set_output", key=key, value=f"{key}!"))

    async with Runtime(tmp_path / "runs.db", provider=ScriptedProvider(turn)) as rt:
        source = await (await rt.start(graph)).result()
        assert source.status == "completed", source.error
        events = await rt.read_events(source.run_id)
        opening = [
            e.seq
            for e in events
            if isinstance(e.body, MessageAdded)
            and e.body.node_id == "b"
            and e.body.kind in ("transition", "inputs")
        ]
        assert len(opening) == 2  # the marker, then the inputs
        turn_seq = opening[-1] + 1
        for cut in opening:
            with pytest.raises(RunStateError, match=f"cannot fork at seq {cut}: .*{turn_seq}"):
                await rt.fork(source.run_id, cut)
        fork = await (await rt.fork(source.run_id, opening[0] - 1)).result()
        assert fork.status == "completed" and fork.memory == source.memory
        assert (await rt.replay(fork.run_id)).equal
