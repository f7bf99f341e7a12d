"""The owner's watch for other processes' events reads only its quiet runs' heads.

A run that keeps handing batches to the store meets another process's cancel, pause or
input at the store's seq check of its next batch, so the watch (every half
``control_interval``) reads the heads of the runs that handed nothing over since its last
look and were not read at it. Real stores on both backends; the store's ``heads`` is
wrapped only to record which runs a look read."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, OwnershipConfig, Runtime
from runtime.control._quiet import quiet_runs
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

#: A self-loop of short steps: the run hands a batch over every few milliseconds.
BUSY = GraphSpec(
    id="busy",
    nodes=[function_node("tick", output_keys=["n"])],
    edges=[
        EdgeSpec(source="tick", target="tick", condition="conditional", expression="n < 100000")
    ],
    entry_node="tick",
    max_steps=200_000,
)

#: One node that waits: the run hands nothing over while it does.
QUIET = GraphSpec(id="quiet", nodes=[function_node("wait")], entry_node="wait")

INTERVAL = 1.0


def test_a_run_is_read_once_it_stays_quiet_and_not_at_the_next_look() -> None:
    marks: dict[str, int | None] = {}
    read, marks = quiet_runs(marks, {"a": 3})
    assert read == []  # new since the last look: marked
    read, marks = quiet_runs(marks, {"a": 3})
    assert read == ["a"]  # quiet since the last look
    read, marks = quiet_runs(marks, {"a": 3})
    assert read == []  # read at the last look
    read, marks = quiet_runs(marks, {"a": 3})
    assert read == ["a"]  # every other look while it stays quiet


def test_a_run_that_handed_a_batch_over_is_not_read_and_a_gone_run_is_forgotten() -> None:
    marks: dict[str, int | None] = {"a": 3, "b": 5}
    read, marks = quiet_runs(marks, {"a": 4, "b": 5})
    assert read == ["b"]  # a handed events 4 over since the last look
    read, marks = quiet_runs(marks, {"a": 4})
    assert read == ["a"] and marks == {"a": None}  # b is no longer live here
    read, marks = quiet_runs(marks, {"a": 9})
    assert read == [] and marks == {"a": 9}


async def test_the_watch_reads_only_the_quiet_run_and_a_cancel_reaches_both(store: str) -> None:
    release = anyio.Event()

    async def tick(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(0.002)
        return {"n": inputs.get("n", 0) + 1}

    async def wait(inputs: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {}

    ownership = OwnershipConfig(control_interval=INTERVAL)
    looks: list[list[str]] = []
    quiet_read = anyio.Event()  # the quiet run read at two looks
    async with Runtime(store, functions={"tick": tick, "wait": wait}, ownership=ownership) as rt:
        assert rt.store is not None
        heads = rt.store.heads

        async def recorded(run_ids: Any) -> dict[str, int]:
            looks.append(list(run_ids))
            if sum("quiet" in look for look in looks) >= 2:
                quiet_read.set()
            return await heads(run_ids)

        rt.store.heads = recorded  # type: ignore[method-assign]
        busy = await rt.start(BUSY, input={"n": 0}, run_id="busy")
        quiet = await rt.start(QUIET, run_id="quiet")
        with anyio.fail_after(10):  # a guard, not a wait
            await quiet_read.wait()
        assert not any(busy.run_id in look for look in looks)
        async with Runtime(store) as other:
            await other.cancel(busy.run_id, reason="elsewhere")
            await other.cancel(quiet.run_id, reason="elsewhere")
        with anyio.fail_after(10):
            busy_result = await busy.result()
            quiet_result = await quiet.result()
        release.set()
    assert busy_result.status == "cancelled" and busy_result.error == "elsewhere"
    assert quiet_result.status == "cancelled" and quiet_result.error == "elsewhere"
    # The busy run never was quiet for a look: the cancel met its next batch.
    assert not any(busy.run_id in look for look in looks)
    assert 0 < busy_result.memory["n"] < 100_000
