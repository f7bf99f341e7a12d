"""Run ownership with the embedded SQLite store (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import RunOwnedError
from runtime import OwnershipConfig, Runtime
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio


async def test_an_error_inside_the_runtime_block_reaches_the_caller_as_itself(
    tmp_path: Path,
) -> None:
    with pytest.raises(KeyError):
        async with Runtime(tmp_path / "runs.db"):
            raise KeyError("mine")


async def test_a_run_live_in_one_runtime_is_refused_by_another_on_the_same_file(
    tmp_path: Path,
) -> None:
    gate = anyio.Event()
    entered = anyio.Event()
    ran: list[str] = []

    async def held(inputs: dict[str, Any]) -> dict[str, Any]:
        ran.append("held")
        entered.set()
        await gate.wait()
        return {"x": 1}

    path = tmp_path / "runs.db"
    graph = linear_graph(["held"])
    async with (
        Runtime(path, functions={"held": held}, ownership=OwnershipConfig(worker_id="first")) as a,
        Runtime(path, functions={"held": held}, ownership=OwnershipConfig(worker_id="second")) as b,
    ):
        handle = await a.start(graph)
        with anyio.fail_after(10):
            await entered.wait()
        with pytest.raises(RunOwnedError) as caught:
            await b.resume(handle.run_id)
        assert caught.value.owner == "first"
        gate.set()
        result = await handle.result()
    assert result.status == "completed" and ran == ["held"]


async def test_a_runs_claim_is_given_up_in_the_transaction_of_its_final_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore._core import WriterCore

    transactions = [0]
    commit = WriterCore.commit

    def counted(self: WriterCore, batch: Any) -> None:
        transactions[0] += 1
        commit(self, batch)

    monkeypatch.setattr(WriterCore, "commit", counted)

    def step(inputs: dict[str, Any]) -> dict[str, Any]:
        return {}

    graph = linear_graph(["a", "b", "c"])
    async with Runtime(tmp_path / "runs.db", functions={n: step for n in "abc"}) as rt:
        assert rt.store is not None
        results = [await (await rt.start(graph)).result() for _ in range(3)]
        infos = [await rt.store.get_run(result.run_id) for result in results]
        batches = rt.store.statistics().batches
    assert [r.status for r in results] == ["completed"] * 3
    assert all(info is not None and info.owner is None for info in infos)
    # Every transaction wrote appends: none of its own for a claim or its release.
    assert transactions[0] == batches
