"""A run whose claim another process took over stops here, with an error that says so."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import LeaseLostError
from runtime import GraphSpec, NodeSpec, OwnershipConfig, Runtime

pytestmark = pytest.mark.anyio


async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(60)
    return {}


GRAPH = GraphSpec(
    id="slow", nodes=[NodeSpec(id="wait", function="slow")], edges=[], entry_node="wait"
)


def _take_over(path: Path, run_id: str) -> None:
    """What another process's claim after an expired lease leaves in the file."""
    with sqlite3.connect(path, timeout=10) as conn:
        conn.execute(
            "UPDATE claims SET owner = 'thief', epoch = epoch + 1, expires = 9e12 WHERE run_id = ?",
            (run_id,),
        )


async def test_a_run_whose_claim_was_taken_over_fails_naming_no_made_up_epoch(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    ownership = OwnershipConfig(lease_seconds=0.6)
    async with Runtime(path, functions={"slow": slow}, ownership=ownership) as rt:
        handle = await rt.start(GRAPH)
        await anyio.to_thread.run_sync(_take_over, path, handle.run_id)
        with anyio.fail_after(30), pytest.raises(LeaseLostError) as lost:
            await handle.result()
    message = str(lost.value)
    assert message == (
        f"run {handle.run_id!r}: this process's claim is lost; its lease could not be "
        "renewed, so the run stopped here"
    )
    assert "-1" not in message
    assert lost.value.expected_epoch is None and lost.value.actual_epoch is None
