"""A graph whose ``llm_decide`` edges would choose with no provider is refused when its run
starts, as an LLM node without one is: before, every run silently took the fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime, SpecErrors
from runtime.testing import ScriptedProvider

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="choose",
    entry_node="a",
    nodes=[
        NodeSpec(id="a", kind="function", function="a"),
        NodeSpec(id="b", kind="function", function="b"),
        NodeSpec(id="c", kind="function", function="c"),
    ],
    edges=[
        EdgeSpec(source="a", target="b", condition="llm_decide", fallback="c"),
        EdgeSpec(source="a", target="c", condition="llm_decide", fallback="c"),
    ],
)
FUNCTIONS = {"a": lambda inputs: {}, "b": lambda inputs: {"went": "b"}, "c": lambda i: {}}


async def test_llm_decide_edges_without_a_provider_are_refused_at_start(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        with pytest.raises(SpecErrors, match=r"edges\[0\]\.condition: an llm_decide edge needs"):
            await rt.start(GRAPH)
        assert rt.store is not None and await rt.store.list_runs() == []


async def test_with_a_provider_the_model_chooses(tmp_path: Path) -> None:
    provider = ScriptedProvider([], router=['{"target": "b"}'])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, provider=provider) as rt:
        result = await (await rt.start(GRAPH)).result()
    assert (result.status, result.path, result.memory) == ("completed", ["a", "b"], {"went": "b"})
