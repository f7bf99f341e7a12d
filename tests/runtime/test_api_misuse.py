"""Mistakes a developer embedding the runtime makes get a clear error naming what was
wrong, not an AttributeError from inside the library, and write nothing: a graph that is
not a GraphSpec, a run id or a seq of the wrong type, a Runtime used after its block or
entered twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import RunStateError, Runtime
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio

FUNCTIONS = {"a": lambda inputs: {"x": 1}}


async def test_arguments_of_the_wrong_kind_are_named(tmp_path: Path) -> None:
    graph = linear_graph(["a"])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        done = await (await rt.start(graph)).result()
        wrong: list[tuple[Any, type[Exception], str]] = [
            (rt.start({"id": "g"}), TypeError, "a graph is a GraphSpec"),  # type: ignore[arg-type]
            (rt.start(graph, run_id=123), TypeError, "a run id is a str"),  # type: ignore[arg-type]
            (rt.get_state(done.run_id, at_seq="3"), TypeError, "at_seq must be a seq"),  # type: ignore[arg-type]
            (rt.get_state(done.run_id, at_seq=True), TypeError, "at_seq must be a seq"),
            (rt.fork(done.run_id, 1.5), TypeError, "at_seq must be a seq"),  # type: ignore[arg-type]
            (rt.read_events(done.run_id, to_seq=0), ValueError, "to_seq must be 1 or more"),
        ]
        for call, error, says in wrong:
            with pytest.raises(error, match=says):
                await call
        assert rt.store is not None and len(await rt.store.list_runs()) == 1


async def test_a_runtime_used_after_its_block_or_entered_twice_says_so(tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "runs.db", functions=FUNCTIONS)
    async with rt:
        with pytest.raises(RunStateError, match="open already"):
            async with rt:
                pass
        done = await (await rt.start(linear_graph(["a"]))).result()
        assert done.status == "completed"
    for call in (rt.start(linear_graph(["a"])), rt.get_state(done.run_id)):
        with pytest.raises(RunStateError, match="the Runtime is not open"):
            await call
    async with rt:  # open again: it works as a new block
        assert (await rt.get_state(done.run_id)).status == "completed"
