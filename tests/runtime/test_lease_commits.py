"""A run's commits confirm its claim: on SQLite and on PostgreSQL, a run whose commits
keep coming keeps its claim while the renewal loop is held back, and a run that commits
nothing for longer than its lease (with no renewal either) is stopped before it appends, and
a process whose loop stalls past its lease loses its run to another worker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import LeaseLostError
from runtime import OwnershipConfig, RecoveryConfig, Runtime
from runtime.control._ownership import RunOwnership
from runtime.events import NodeCompleted, RunFinished, fold
from runtime.testing import linear_graph
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

from .stalling_owner import NODES as STALLING

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio

LEASE = 1.0
NODES = [f"n{i}" for i in range(30)]  # 0.1 s each: three leases in all


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url, prefix = pg_url(), fresh_prefix()
    yield f"{url}?schema={prefix}_store"
    drop_schemas(prefix)


@pytest.fixture
def renewals_held_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The renewal loop never renews anything (as if it were queued behind a backlog)."""

    async def held_back(self: RunOwnership, on_lost: Any) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(RunOwnership, "keep_leases", held_back)


async def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(0.1)
    return {"steps": int(inputs.get("steps", 0)) + 1}


@pytest.fixture
async def runtime(store_url: str, renewals_held_back: None) -> AsyncIterator[Runtime]:
    async def stalls(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(LEASE * 1.5)  # no commit meanwhile, and no renewal
        return {}

    functions = {name: _step for name in NODES} | {"stalls": stalls}
    async with Runtime(
        store_url, functions=functions, ownership=OwnershipConfig(lease_seconds=LEASE)
    ) as rt:
        yield rt


async def test_a_run_whose_commits_keep_coming_keeps_its_claim_without_renewals(
    runtime: Runtime,
) -> None:
    handle = await runtime.start(linear_graph(NODES, durability="sync"))
    with anyio.fail_after(60):
        result = await handle.result()
    assert result.status == "completed", result.error
    assert result.memory["steps"] == len(NODES)
    events = await runtime.read_events(handle.run_id)
    assert [e.body.node_id for e in events if isinstance(e.body, NodeCompleted)] == NODES


async def test_a_run_that_commits_nothing_for_a_lease_stops_before_it_appends(
    runtime: Runtime,
) -> None:
    handle = await runtime.start(linear_graph(["n0", "stalls", "n1"], durability="sync"))
    with anyio.fail_after(60), pytest.raises(LeaseLostError):
        await handle.result()
    events = await runtime.read_events(handle.run_id)
    # The stalled node's completion was never appended, nor anything after it.
    assert [e.body.node_id for e in events if isinstance(e.body, NodeCompleted)] == ["n0"]


def _spawn_stalling(path: Path, lease: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.stalling_owner", str(path), str(lease)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_a_process_whose_loop_stalls_past_its_lease_loses_its_run_and_appends_nothing(
    tmp_path: Path,
) -> None:
    """A process blocks its event loop for three leases inside a node (its store's writer
    thread runs on): another worker takes the run over once the lease ran out and finishes
    it; the stalled process appends nothing more (the stalled node's completion is not
    recorded) and its result raises LeaseLostError."""
    path = tmp_path / "runs.db"
    stalled = _spawn_stalling(path, lease=1.0)
    try:
        assert stalled.stdout is not None
        run_id = stalled.stdout.readline().strip()
        assert stalled.stdout.readline().strip() == "stalling"

        async def rescue(inputs: dict[str, Any]) -> dict[str, Any]:
            return {"by": "rescuer"}

        async with Runtime(
            path,
            functions=dict.fromkeys(STALLING, rescue),
            ownership=OwnershipConfig(lease_seconds=5, worker_id="rescuer"),
            recovery=RecoveryConfig(interval=0.2),
        ) as worker:

            async def finished() -> bool:
                info = await worker.store.get_run(run_id)  # type: ignore[union-attr]
                return info is not None and info.status == "completed"

            await wait_until(finished, 60)
            events = await worker.read_events(run_id)
            report = await worker.store.verify(run_id)  # type: ignore[union-attr]
        outcome = await anyio.to_thread.run_sync(stalled.stdout.readline)
        assert outcome.strip() == "LeaseLostError"
    finally:
        stalled.kill()
        stalled.wait()
        if stalled.stdout is not None:
            stalled.stdout.close()
    assert report.ok
    completed = [e.body.node_id for e in events if isinstance(e.body, NodeCompleted)]
    assert completed == STALLING  # each node once: the stalled attempt recorded nothing
    assert fold(events).memory["by"] == "rescuer"
    assert sum(isinstance(e.body, RunFinished) for e in events) == 1
