"""The runs listing over real HTTP carries a bounded part of a paused run's values: a run
holding a 1 MB value does not make every page of runs weigh a megabyte; its detail gives
the value whole."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec

from .support import QUICK, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

MEGA = "x" * 1_000_000
KEYS = [f"k{n}" for n in range(10)]

#: A gate that reads ten keys: ten values of 500 bytes do not all fit in a listing's row.
WIDE = GraphSpec(
    id="wide",
    nodes=[
        NodeSpec(id="step", kind="function", function="step"),
        NodeSpec(id="gate", kind="function", function="step", input_keys=KEYS),
    ],
    edges=[EdgeSpec(source="step", target="gate")],
    entry_node="step",
    pause_nodes=["gate"],
)


async def test_a_page_of_runs_stays_small_when_a_paused_run_holds_a_megabyte(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        big = (await s.runtime.start(QUICK, input={"ok": MEGA})).run_id
        small = (await s.runtime.start(QUICK, input={"ok": {"n": 1.0}})).run_id
        for run_id in (big, small):
            await s.wait_status(run_id, "paused")

        for params in ({}, {"status": "paused"}):
            response = await s.client.get("/api/runs", params=params)
            assert response.status_code == 200
            assert len(response.content) < 10_000, len(response.content)
        rows = {r["run_id"]: r["paused"] for r in response.json()["runs"]}
        assert rows[big]["values"] == {}
        assert rows[big]["values_omitted"] == ["ok"]
        assert rows[big]["reads"] == ["ok"] and rows[big]["waiting_for"] == []
        # A small value is in the row, as memory holds it.
        assert rows[small]["values"] == {"ok": {"n": 1.0}}
        assert isinstance(rows[small]["values"]["ok"]["n"], float)
        assert rows[small]["values_omitted"] == []

        # The run's own route gives the whole value.
        detail = (await s.client.get(f"/api/runs/{big}")).json()
        assert detail["summary"]["paused"]["values"] == {"ok": MEGA}
        assert detail["summary"]["paused"]["values_omitted"] == []
        assert detail["memory"]["ok"] == MEGA


async def test_a_row_keeps_the_values_that_fit_in_reads_order_and_names_the_others(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        values = {key: key * 250 for key in KEYS}  # 500 characters each
        run_id = (await s.runtime.start(WIDE, input=values)).run_id
        await s.wait_status(run_id, "paused")

        (row,) = (await s.client.get("/api/runs")).json()["runs"]
        listed, omitted = row["paused"]["values"], row["paused"]["values_omitted"]
        assert list(listed) + omitted == KEYS  # each key once, in reads order
        assert listed and omitted
        assert all(listed[key] == values[key] for key in listed)
        assert sum(len(msgspec.json.encode(v)) for v in listed.values()) <= 2048

        detail = (await s.client.get(f"/api/runs/{run_id}")).json()
        assert detail["summary"]["paused"]["values"] == values
