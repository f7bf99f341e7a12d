"""Run ownership on PostgreSQL, with real processes: refusal, recovery, control.

Each test has schemas of its own; processes are killed with real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from eventstore import PostgresEventStore, RunOwnedError
from runtime import OwnershipConfig, RecoveryConfig, Runtime
from runtime.events import NodeCompleted, fold
from runtime.testing import linear_graph
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

from .owned_worker import NODES, functions, graph

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix() -> Iterator[str]:
    """Schemas of the test's own: PREFIX_store (the store) and PREFIX_side (side effects)."""
    url = pg_url()
    name = fresh_prefix()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}_side")
        conn.execute(f"CREATE TABLE {name}_side.side (run_id text, node text, event text, pid int)")
    yield name
    drop_schemas(name)


def _spawn(url: str, schema: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.owned_worker", url, schema, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _side(url: str, prefix: str) -> list[tuple[str, str, str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT run_id, node, event, pid FROM {prefix}_side.side").fetchall()
    return [(str(a), str(b), str(c), int(d)) for a, b, c, d in rows]


async def test_a_run_live_elsewhere_is_refused_naming_its_owner(prefix: str) -> None:
    url = pg_url()
    store = f"{url}?schema={prefix}_store"
    fns = functions(url, prefix, pause=0.2)
    async with (
        Runtime(store, functions=fns, ownership=OwnershipConfig(worker_id="owner-a")) as a,
        Runtime(store, functions=fns, ownership=OwnershipConfig(worker_id="owner-b")) as b,
    ):
        handle = await a.start(graph(), input={"seed": 1})
        with pytest.raises(RunOwnedError) as caught:
            await b.resume(handle.run_id)
        assert caught.value.owner == "owner-a" and "owner-a" in str(caught.value)
        result = await handle.result()
    assert result.status == "completed"
    # b executed nothing: every node ran once, in a's process.
    side = _side(url, prefix)
    assert sorted(node for _, node, event, _ in side if event == "start") == sorted(NODES)


async def test_cancel_from_another_process_interrupts_a_long_model_call(prefix: str) -> None:
    url = pg_url()
    store = f"{url}?schema={prefix}_store"
    owner = _spawn(url, prefix, "slow")
    try:
        assert owner.stdout is not None
        run_id = owner.stdout.readline().strip()
        async with Runtime(store) as rt:

            async def in_model_call() -> bool:
                return bool((await rt.get_state(run_id)).running)

            await wait_until(in_model_call, 20)  # the node is in its 30 s model call
            await rt.cancel(run_id, reason="from elsewhere")
            started = time.monotonic()
            # The owner stops well within the model call's 30 s and reports the cancel.
            status = await anyio.to_thread.run_sync(owner.stdout.readline)
            waited = time.monotonic() - started
            state = await rt.get_state(run_id)
        assert status.strip() == "cancelled"
        assert waited < 15
        assert state.status == "cancelled" and state.error == "from elsewhere"
        assert owner.wait(timeout=20) == 0
    finally:
        _stop(owner)


@pytest.mark.slow
async def test_a_killed_owners_runs_are_recovered_without_rerunning_completed_nodes(
    prefix: str,
) -> None:
    url = pg_url()
    store_schema = f"{prefix}_store"
    owner = _spawn(url, prefix, "start", "50")
    try:
        assert owner.stdout is not None
        run_ids = owner.stdout.readline().split()[1:]
        assert len(run_ids) == 50

        async def some_nodes_ended() -> bool:
            return sum(e == "end" for _, _, e, _ in _side(url, prefix)) >= 60

        await wait_until(some_nodes_ended, 60)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        killed = owner.pid
        async with PostgresEventStore(url, schema=store_schema) as store:
            done_before = {
                run_id: {
                    e.body.node_id
                    for e in await store.read_all(run_id)
                    if isinstance(e.body, NodeCompleted)
                }
                for run_id in run_ids
            }
            unfinished = [r for r in run_ids if len(done_before[r]) < len(NODES)]
        assert unfinished  # the kill left runs in the middle
        async with Runtime(
            f"{url}?schema={store_schema}",
            functions=functions(url, prefix),
            ownership=OwnershipConfig(lease_seconds=2),
            recovery=RecoveryConfig(interval=0.2),
        ) as rt:
            with anyio.fail_after(90):
                while True:
                    states = [await rt.get_state(run_id) for run_id in run_ids]
                    if all(s.status == "completed" for s in states):
                        break
                    await anyio.sleep(0.1)
            logs = {run_id: await rt.read_events(run_id) for run_id in run_ids}
            reports = [await rt.store.verify(run_id) for run_id in run_ids]  # type: ignore[union-attr]
    finally:
        _stop(owner)
    for seed, run_id in enumerate(run_ids):
        state = fold(logs[run_id])
        assert state.memory["total"] == 10 * seed + sum(range(10))
        assert state.path == NODES
        completions = [e.body.node_id for e in logs[run_id] if isinstance(e.body, NodeCompleted)]
        assert sorted(completions) == sorted(NODES)  # each node completed exactly once
    assert all(report.ok for report in reports)
    side = _side(url, prefix)
    for run_id, node, event, pid in side:
        if pid != killed and event == "start":
            assert node not in done_before[run_id], (run_id, node)


async def test_a_completed_runs_claim_goes_with_its_final_append(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore import _postgres_claims

    released: list[str] = []
    release = _postgres_claims.release

    async def counted(conn: Any, claim: Any, channel: str) -> bool:
        released.append(claim.run_id)  # a release on the claims' own connection
        return await release(conn, claim, channel)

    monkeypatch.setattr(_postgres_claims, "release", counted)

    def step(inputs: dict[str, Any]) -> dict[str, Any]:
        return {}

    url = pg_url()
    graph = linear_graph(["a", "b"])
    async with Runtime(f"{url}?schema={prefix}_store", functions={"a": step, "b": step}) as rt:
        assert rt.store is not None
        results = [await (await rt.start(graph)).result() for _ in range(3)]
        infos = [await rt.store.get_run(result.run_id) for result in results]
    assert [r.status for r in results] == ["completed"] * 3
    assert all(info is not None and info.owner is None for info in infos)
    assert released == []  # each went with its run's final append
