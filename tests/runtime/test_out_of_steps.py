"""A run stopped by ``max_steps`` says which nodes failed on the way: an ``on_failure``
loop back to a node that keeps failing ends with that said, not only the step bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, Runtime
from runtime.spec import RetryPolicy
from runtime.testing import function_node

pytestmark = pytest.mark.anyio


def flaky(inputs: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the ledger is down")


def fine(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


async def test_max_steps_names_the_nodes_that_kept_failing(tmp_path: Path) -> None:
    graph = GraphSpec(
        id="loop",
        entry_node="a",
        max_steps=5,
        retry=RetryPolicy(max_attempts=1),
        nodes=[function_node("a", "flaky"), function_node("b", "fine", output_keys=["ok"])],
        edges=[
            EdgeSpec(source="a", target="a", condition="on_failure"),
            EdgeSpec(source="a", target="b"),
        ],
    )
    async with Runtime(tmp_path / "runs.db", functions={"flaky": flaky, "fine": fine}) as rt:
        result = await (await rt.start(graph)).result()
    assert result.status == "failed"
    assert result.error == (
        "max_steps (5) reached before 'a' (nodes failed on the way: 'a' 5 times)"
    )


async def test_max_steps_without_failures_says_only_the_bound(tmp_path: Path) -> None:
    graph = GraphSpec(
        id="spin",
        entry_node="b",
        max_steps=3,
        nodes=[function_node("b", "fine", output_keys=["ok"])],
        edges=[EdgeSpec(source="b", target="b")],
    )
    async with Runtime(tmp_path / "runs.db", functions={"fine": fine}) as rt:
        result = await (await rt.start(graph)).result()
    assert (result.status, result.error) == ("failed", "max_steps (3) reached before 'b'")
