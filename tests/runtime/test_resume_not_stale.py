"""A resume never returns a handle that is already stale (issue 26): ``resume()`` returns
once its first step is in the store, or raises what happened when another writer got
there first. 30 resume+cancel pairs from two runtimes on one store, for each durability:
a resume that returned has ``run.resumed`` on record when it returns, one that lost raised
RunChangedError itself (its handle's result never does), and no claim is left behind."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RunChangedError, RunStateError, Runtime
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

PAIRS = 30


def _graph(durability: str) -> GraphSpec:
    return GraphSpec(
        id="steps",
        nodes=[function_node("a", output_keys=["a"]), function_node("b", output_keys=["b"])],
        edges=[EdgeSpec(source="a", target="b")],
        entry_node="a",
        durability=durability,
    )


def _tags(events: list[Any]) -> list[str]:
    return [e.body.__struct_config__.tag for e in events]


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_resume_that_loses_raises_and_one_that_returns_has_acted(
    store: str, durability: str
) -> None:
    go = anyio.Event()

    async def a(inputs: dict[str, Any]) -> dict[str, Any]:
        await go.wait()
        return {"a": 1}

    functions = {"a": a, "b": lambda inputs: {"b": 2}}
    graph = _graph(durability)
    async with (
        Runtime(store, functions=functions) as resumer,
        Runtime(store) as canceller,
    ):
        ids = []
        for _ in range(PAIRS):
            go = anyio.Event()
            handle = await resumer.start(graph)
            await resumer.pause(handle.run_id)
            go.set()
            assert (await handle.result()).status == "paused"
            ids.append(handle.run_id)
        answers: dict[str, str] = {}
        at_return: dict[str, list[str]] = {}
        results: dict[str, str] = {}

        async def resume(run_id: str) -> None:
            try:
                handle = await resumer.resume(run_id)
            except RunChangedError as exc:
                assert exc.status == "cancelled", exc
                answers[run_id] = "lost"
                return
            answers[run_id] = "acted"
            at_return[run_id] = _tags(await canceller.read_events(run_id))
            results[run_id] = (await handle.result()).status  # never raises

        async def cancel(run_id: str) -> None:
            with contextlib.suppress(RunStateError):  # it finished first
                await canceller.cancel(run_id, reason="no")

        for run_id in ids:
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, run_id)
                tg.start_soon(cancel, run_id)
        for run_id in ids:
            with anyio.fail_after(10):
                while (await resumer.get_state(run_id)).status == "running":  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # a cancel from elsewhere reaches the owner
        states = {run_id: await resumer.get_state(run_id) for run_id in ids}
        logs = {run_id: _tags(await resumer.read_events(run_id)) for run_id in ids}
    for run_id in ids:
        tags = logs[run_id]
        after = tags[tags.index("run.paused") + 1 :]
        if answers[run_id] == "lost":
            assert after == ["run.cancelled"], tags
            assert states[run_id].status == "cancelled"
        else:
            seen = at_return[run_id]
            # Its first step was on record when resume() returned.
            assert "run.resumed" in seen[seen.index("run.paused") + 1 :], seen
            assert results[run_id] == states[run_id].status
            assert states[run_id].status in ("completed", "cancelled")
    assert set(answers.values()) <= {"lost", "acted"} and len(answers) == PAIRS
    async with Runtime(store) as reader:
        assert reader.store is not None
        for run_id in ids:
            info = await reader.store.get_run(run_id)
            assert info is not None and info.owner is None, run_id
