"""A cancel reaches a run at once while a model chooses its llm_decide edge: the run
ends cancelled with the deciding node as its resume point, and a resume asks again. After
a node failed no model is asked: its on_failure edges fire at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RetryPolicy, Runtime
from runtime.events import EdgeTaken
from runtime.testing import function_node
from tests.runtime.gated import GatedProvider

pytestmark = pytest.mark.anyio


#: The gated model's answer to every routing question: route to "c".
CHOOSE_C = '{"target": "c", "reasoning": "c fits"}'


def _graph() -> GraphSpec:
    return GraphSpec(
        id="decide",
        nodes=[function_node("a"), function_node("b"), function_node("c")],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="b"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="b"),
        ],
        entry_node="a",
    )


def _functions() -> dict[str, Any]:
    return {
        "a": lambda inputs: {"a": 1},
        "b": lambda inputs: {"took": "b"},
        "c": lambda inputs: {"took": "c"},
    }


async def test_cancel_while_a_model_chooses_the_edge_ends_the_run_and_resume_asks_again(
    tmp_path: Path,
) -> None:
    provider = GatedProvider(CHOOSE_C)
    with anyio.fail_after(60):
        async with Runtime(tmp_path / "runs.db", functions=_functions(), provider=provider) as rt:
            handle = await rt.start(_graph())
            await provider.asked.wait()
            await rt.cancel(handle.run_id, reason="stop")
            cancelled = await handle.result()
            # The run ended while the model still had not answered.
            assert not provider.release.is_set()
            state = await rt.get_state(handle.run_id)
            assert cancelled.status == "cancelled"
            assert state.cancelled_at == "a" and state.error == "stop"
            events = await rt.read_events(handle.run_id)
            assert not [e for e in events if isinstance(e.body, EdgeTaken)]

            provider.release.set()
            resumed = await rt.resume(handle.run_id)
            result = await resumed.result()
            events = await rt.read_events(handle.run_id)
    assert result.status == "completed"
    assert result.memory == {"a": 1, "took": "c"}
    assert provider.calls == 2  # asked again after the resume
    edges = [(e.body.source, e.body.target) for e in events if isinstance(e.body, EdgeTaken)]
    assert edges == [("a", "c")]


async def test_after_a_failed_node_no_model_is_asked_and_on_failure_edges_fire(
    tmp_path: Path,
) -> None:
    provider = GatedProvider(CHOOSE_C)  # never released: asking it would hold the run
    graph = GraphSpec(
        id="decide",
        nodes=[function_node("a"), function_node("b"), function_node("c"), function_node("r")],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="b"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="b"),
            EdgeSpec(source="a", target="r", condition="on_failure"),
        ],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )

    def fail(inputs: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("a broke")

    functions = {**_functions(), "a": fail, "r": lambda inputs: {"took": "r"}}
    with anyio.fail_after(60):
        async with Runtime(tmp_path / "runs.db", functions=functions, provider=provider) as rt:
            result = await (await rt.start(graph)).result()
            events = await rt.read_events(result.run_id)
    assert provider.calls == 0
    assert result.status == "completed" and result.quality == "degraded"
    assert result.memory == {"took": "r"}
    edges = [(e.body.target, e.body.condition) for e in events if isinstance(e.body, EdgeTaken)]
    assert edges == [("r", "on_failure")]
