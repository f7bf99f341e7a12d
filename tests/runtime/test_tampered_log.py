"""get_state and resume fold only a log whose hash chain holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from eventstore import CorruptLogError
from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="three",
    nodes=[NodeSpec(id=n, function="step", output_keys=["count"]) for n in ("a", "b", "c")],
    edges=[EdgeSpec(source="a", target="b"), EdgeSpec(source="b", target="c")],
    entry_node="a",
    terminal_nodes=["c"],
)
ran: list[str] = []


async def step(inputs: dict[str, Any]) -> dict[str, Any]:
    ran.append("step")
    return {"count": len(ran)}


def tamper(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


async def completed_run(path: Path) -> str:
    async with Runtime(path, functions={"step": step}) as rt:
        handle = await rt.start(GRAPH, input={})
        result = await handle.result()
        assert result.status == "completed", result.error
        return handle.run_id


async def test_a_completed_run_whose_last_rows_were_deleted_is_corrupt_not_running(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    run_id = await completed_run(path)
    tamper(path, "DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)")
    ran.clear()
    async with Runtime(path, functions={"step": step}) as rt:
        with pytest.raises(CorruptLogError) as state_error:
            await rt.get_state(run_id)
        with pytest.raises(CorruptLogError) as resume_error:
            await rt.resume(run_id)
        # Time travel to a seq before the cut still reads.
        assert (await rt.get_state(run_id, at_seq=2)).status == "running"
    assert state_error.value.seq == resume_error.value.seq
    assert ran == []  # nothing ran again on a log that lost its end
