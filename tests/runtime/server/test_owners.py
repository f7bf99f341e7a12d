"""Who executes each run, as the runs list and a run's summary say over real HTTP: the
owner of a live claim, a running run waiting for a worker, and a store without claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from eventstore import ClaimingStore, EventStore, SqliteEventStore
from runtime import OwnershipConfig, RecoveryConfig, Runtime

from .support import AUTH, FUNCTIONS, GATE, HELD, Served, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]


async def _rows(s: Served) -> dict[str, dict[str, Any]]:
    response = await s.client.get("/api/runs")
    assert response.status_code == 200, response.text
    return {r["run_id"]: r for r in response.json()["runs"]}


async def _owner(s: Served, run_id: str) -> tuple[str, str | None, str]:
    """A run's (status, owner, ownership) as the runs list and its summary both say (read
    again while a claim changes between the two reads)."""
    while True:
        row = (await _rows(s))[run_id]
        summary = (await s.client.get(f"/api/runs/{run_id}")).json()["summary"]
        listed = (row["status"], row["owner"], row["ownership"])
        if listed == (summary["status"], summary["owner"], summary["ownership"]):
            return listed


async def _wait_owner(s: Served, run_id: str, owner: str | None) -> None:
    while (await _owner(s, run_id))[1] != owner:
        pass


async def test_the_runs_list_names_the_worker_holding_each_run_or_says_it_waits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    GATE.clear()
    try:
        async with served(path) as s:
            here = s.runtime.worker_id
            started = await s.client.post("/api/runs", json={"graph": "held"}, headers=AUTH)
            live = started.json()["run_id"]
            await s.wait_status(live, "running")
            assert await _owner(s, live) == ("running", here, "claimed")

            # Submitted for any worker: the log says running, and no process holds it.
            submitted = await s.runtime.submit(HELD, input={})
            assert await _owner(s, submitted) == ("running", None, "waiting")

            async with Runtime(
                path,
                functions=FUNCTIONS,
                ownership=OwnershipConfig(worker_id="worker-b"),
                recovery=RecoveryConfig(),
            ):
                await _wait_owner(s, submitted, "worker-b")
                assert await _owner(s, submitted) == ("running", "worker-b", "claimed")
                assert await _owner(s, live) == ("running", here, "claimed")
                GATE.set()
                await s.wait_status(submitted, "completed")
                await s.wait_status(live, "completed")
                # A finished run's claim is given up with its last events.
                await _wait_owner(s, submitted, None)
                assert await _owner(s, submitted) == ("completed", None, "unclaimed")
                await _wait_owner(s, live, None)
                assert await _owner(s, live) == ("completed", None, "unclaimed")
    finally:
        GATE.set()


class _NoClaims:
    """A store that records no ownership: a SQLite store's EventStore methods alone."""

    _HIDDEN = frozenset(("claim", "renew", "release", "heads", "claim_runnable"))

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN or name.startswith("submit_") or name == "runnable_signal":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_store_without_claims_lists_its_runs_ownership_as_unrecorded(
    tmp_path: Path,
) -> None:
    GATE.clear()
    try:
        async with SqliteEventStore(tmp_path / "runs.db") as inner:
            store = _NoClaims(inner)
            assert isinstance(store, EventStore) and not isinstance(store, ClaimingStore)
            async with served(cast(EventStore, store)) as s:
                started = await s.client.post("/api/runs", json={"graph": "held"}, headers=AUTH)
                run_id = started.json()["run_id"]
                await s.wait_status(run_id, "running")
                # It runs in this process unclaimed: not "waiting", and no owner made up.
                assert await _owner(s, run_id) == ("running", None, "unrecorded")
                GATE.set()
                await s.wait_status(run_id, "completed")
    finally:
        GATE.set()
