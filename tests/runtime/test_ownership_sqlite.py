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
