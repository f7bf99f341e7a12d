"""Workers on PostgreSQL, with real processes: submitted runs run exactly once, a killed
worker's runs are taken over, a paused run continues on any worker, a stale worker is
fenced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import IO

import anyio
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from runtime import RunStateError, Runtime, RuntimeMetrics, run_worker
from runtime.events import EdgeTaken, NodeCompleted, RunFinished, RunResumed, fold
from runtime.testing import linear_graph
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

from .owned_worker import NODES, functions

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


class Workers:
    """Worker processes (``python -m tests.runtime.owned_worker ... worker``)."""

    def __init__(self, url: str, prefix: str, logs: Path) -> None:
        self.logs = logs
        self.url = url
        self.prefix = prefix
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, concurrency: int, lease: float, pause: float = 0.0) -> subprocess.Popen[str]:
        log = self.logs / f"worker{len(self.processes)}.log"
        with log.open("w") as stderr:
            process = self._popen(concurrency, lease, pause, stderr)
        self.processes.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        return process

    def log(self, process: subprocess.Popen[str]) -> str:
        """What the worker wrote to stderr (its warnings)."""
        return (self.logs / f"worker{self.processes.index(process)}.log").read_text()

    def _popen(
        self, concurrency: int, lease: float, pause: float, stderr: IO[str]
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.runtime.owned_worker",
                self.url,
                self.prefix,
                "worker",
                str(concurrency),
                str(lease),
                str(pause),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def workers(prefix: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(pg_url(), prefix, tmp_path)
    yield group
    group.stop()


def _side(url: str, prefix: str) -> list[tuple[str, str, str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT run_id, node, event, pid FROM {prefix}_side.side").fetchall()
    return [(str(a), str(b), str(c), int(d)) for a, b, c, d in rows]


async def _all_finished(rt: Runtime, run_ids: list[str], timeout: float) -> None:
    async def finished() -> bool:
        done = await rt.store.list_runs(status="completed", limit=len(run_ids) + 10)  # type: ignore[union-attr]
        return len({info.run_id for info in done} & set(run_ids)) == len(run_ids)

    await wait_until(finished, timeout)


@pytest.mark.slow
async def test_four_workers_run_400_submitted_runs_exactly_once(
    prefix: str, workers: Workers
) -> None:
    url = pg_url()
    # Nobody is killed here: a lease long beside a starved process's pauses on a loaded
    # 2-core machine, so no live run's lease runs out and is taken over (the takeover of
    # a lapsed lease, and what it may run again, is the next tests' subject).
    for _ in range(4):
        workers.start(concurrency=50, lease=15)
    graph = linear_graph(NODES[:3], graph_id="short")
    async with Runtime(f"{url}?schema={prefix}_store", functions=functions(url, prefix)) as rt:
        ids: dict[int, str] = {}

        async def submit(seed: int) -> None:
            ids[seed] = await rt.submit(graph, input={"seed": seed})

        async with anyio.create_task_group() as tg:
            for seed in range(400):
                tg.start_soon(submit, seed)
        run_ids = [ids[seed] for seed in range(400)]
        await _all_finished(rt, run_ids, 240)
        finishes = Counter()
        for run_id in run_ids:
            events = await rt.read_events(run_id)
            finishes[sum(isinstance(e.body, RunFinished) for e in events)] += 1
        states = {run_id: await rt.get_state(run_id) for run_id in run_ids[:20]}
    assert finishes == Counter({1: 400})
    side = _side(url, prefix)
    ends = Counter((run_id, node) for run_id, node, event, _ in side if event == "end")
    assert len(ends) == 400 * 3 and set(ends.values()) == {1}  # every node ran once
    assert len({pid for *_, pid in side}) >= 2  # the work was shared
    for seed, run_id in enumerate(run_ids[:20]):
        assert states[run_id].memory["total"] == 3 * seed + 0 + 1 + 2


@pytest.mark.slow
async def test_a_killed_workers_runs_are_taken_over_after_its_lease(
    prefix: str, workers: Workers
) -> None:
    url = pg_url()
    lease = 1.5
    # Slow nodes (10 s a run): the runs are still live once the heir has started, however
    # long a loaded machine takes to start it.
    doomed = workers.start(concurrency=20, lease=lease, pause=1.0)
    async with Runtime(f"{url}?schema={prefix}_store", functions=functions(url, prefix)) as rt:
        run_ids = [await rt.submit(linear_graph(NODES), input={"seed": i}) for i in range(10)]

        async def doomed_is_working() -> bool:
            ends = [pid for *_, e, pid in _side(url, prefix) if e == "end"]
            return len(ends) >= 15

        await wait_until(doomed_is_working, 60)
        # An heir that waits beside it: it must not take a run before the lease expired.
        workers.start(concurrency=20, lease=lease)
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.time()
        doomed.wait()
        await _all_finished(rt, run_ids, 120)
        logs = {run_id: await rt.read_events(run_id) for run_id in run_ids}
    taken_over = 0
    for seed, run_id in enumerate(run_ids):
        events = logs[run_id]
        completions = Counter(e.body.node_id for e in events if isinstance(e.body, NodeCompleted))
        assert completions == Counter(NODES), run_id  # each node completed exactly once
        # The first resume is the first claim of the submitted run; later ones are takeovers,
        # which wait until the killed worker's lease (renewed every third of it) expired.
        takeovers = [e for e in events if isinstance(e.body, RunResumed)][1:]
        assert all(e.ts >= killed_at + lease / 3 for e in takeovers), run_id
        taken_over += bool(takeovers)
        assert fold_total(events) == 10 * seed + sum(range(10))
    assert taken_over > 0


def fold_total(events: list) -> int:  # type: ignore[type-arg]
    return int(fold(events).memory["total"])


async def test_a_paused_run_approved_elsewhere_continues_on_a_worker(
    prefix: str, workers: Workers
) -> None:
    url = pg_url()
    workers.start(concurrency=5, lease=5)
    graph = linear_graph(NODES[:3], graph_id="approve", pause_nodes=["n1"])
    async with Runtime(f"{url}?schema={prefix}_store", functions=functions(url, prefix)) as rt:
        run_id = await rt.submit(graph, input={"seed": 5})

        async def paused() -> bool:
            return (await rt.get_state(run_id)).status == "paused"

        await wait_until(paused, 30)
        with pytest.raises(RunStateError, match="waits for approval"):
            await rt.submit_resume(run_id)  # only an approval passes a gate
    # Approved from a runtime that cannot execute the graph (none of its functions, as
    # the CLI or a dashboard without the app's code): recorded, left to the worker.
    async with Runtime(f"{url}?schema={prefix}_store") as bare:
        assert await bare.approve(run_id, by="ops", input={"approved": True}) is None
    async with Runtime(f"{url}?schema={prefix}_store", functions=functions(url, prefix)) as rt:
        await _all_finished(rt, [run_id], 30)
        state = await rt.get_state(run_id)
    assert state.memory["approved"] is True and state.path == NODES[:3]
    assert state.memory["total"] == 3 * 5 + 3
    workers_pids = {pid for *_, pid in _side(url, prefix)}
    assert workers_pids == {workers.processes[0].pid}


@pytest.mark.slow
async def test_a_stale_worker_is_fenced_and_writes_nothing(prefix: str, workers: Workers) -> None:
    url = pg_url()
    stale = workers.start(concurrency=5, lease=1.0, pause=0.4)
    async with Runtime(f"{url}?schema={prefix}_store", functions=functions(url, prefix)) as rt:
        run_id = await rt.submit(linear_graph(NODES), input={"seed": 1})

        async def started() -> bool:
            return any(e == "start" for *_, e, _ in _side(url, prefix))

        await wait_until(started, 30)
        os.kill(stale.pid, signal.SIGSTOP)  # past its lease, in the middle of a node
        healthy = workers.start(concurrency=5, lease=5)

        async def taken_over() -> bool:
            return any(pid == healthy.pid for *_, pid in _side(url, prefix))

        await wait_until(taken_over, 30)
        os.kill(stale.pid, signal.SIGCONT)
        await _all_finished(rt, [run_id], 60)

        async def stale_noticed() -> bool:  # its lease ran out, or its renewal was refused
            log = workers.log(stale)
            return "claim was lost" in log or "this process stalled" in log

        await wait_until(stale_noticed, 60)
        events = await rt.read_events(run_id)
        report = await rt.store.verify(run_id)  # type: ignore[union-attr]
    completions = Counter(e.body.node_id for e in events if isinstance(e.body, NodeCompleted))
    assert completions == Counter(NODES)
    assert sum(isinstance(e.body, RunFinished) for e in events) == 1
    assert report.ok
    assert stale.poll() is None  # it stopped the run, not itself


async def test_a_submitted_run_wakes_a_worker_long_before_its_poll_interval(
    prefix: str,
) -> None:
    url = pg_url()
    store = f"{url}?schema={prefix}_store"
    graph = linear_graph(NODES[:2], graph_id="woken")
    ready = anyio.Event()
    async with (
        Runtime(store, functions=functions(url, prefix)) as rt,
        anyio.create_task_group() as tg,
    ):
        # A worker that polls once every 10 minutes: only the store's NOTIFY can wake it.
        tg.start_soon(
            partial(
                run_worker,
                store,
                functions=functions(url, prefix),
                poll_interval=600,
                on_ready=lambda _: ready.set(),
            )
        )
        await ready.wait()
        for seed in (1, 2):  # the second once the worker surely listens
            run_id = await rt.submit(graph, input={"seed": seed})
            await _all_finished(rt, [run_id], 60)
            assert (await rt.get_state(run_id)).memory["total"] == 2 * seed + 1
        tg.cancel_scope.cancel()


async def test_a_fork_runs_in_its_creator_while_a_worker_runs(
    prefix: str, workers: Workers
) -> None:
    """A fork whose copy ends running is runnable to a worker the moment it is written: the
    creator claims it in the transaction that writes it, so no worker takes it first."""
    url = pg_url()
    workers.start(concurrency=5, lease=5, pause=0.0)
    registry = CollectorRegistry()
    async with Runtime(
        f"{url}?schema={prefix}_store",
        functions=functions(url, prefix, 0.0),
        metrics=RuntimeMetrics(registry),
    ) as rt:
        source = await (await rt.start(linear_graph(NODES[:3]), input={"seed": 1})).result()
        events = await rt.read_events(source.run_id)
        at = next(e.seq for e in events if isinstance(e.body, EdgeTaken))  # mid-run
        assert (await rt.get_state(source.run_id, at_seq=at)).status == "running"
        results = [await (await rt.fork(source.run_id, at)).result() for _ in range(12)]
        forks = {result.run_id for result in results}
        active = registry.get_sample_value("magistrate_runs_active")
    assert all(result.status == "completed" for result in results)
    ran_in = {pid for run_id, _, _, pid in _side(url, prefix) if run_id in forks}
    assert ran_in == {os.getpid()}
    assert active == 0


@pytest.mark.slow
async def test_a_worker_stalled_past_its_lease_stops_its_runs_and_claims_each_once_more(
    prefix: str, workers: Workers
) -> None:
    """One worker with room for more runs, stopped (SIGSTOP) until every lease it holds
    has been out for two lease lengths on the store's clock, then continued: it stops its
    executors of expired claims and gives them up before claiming anything, so each run is
    claimed again once, not in a storm of claims and releases with itself, and every node
    still completes exactly once."""
    url = pg_url()
    worker = workers.start(concurrency=64, lease=2.0, pause=0.3)
    schema = f"{prefix}_store"
    async with Runtime(f"{url}?schema={schema}", functions=functions(url, prefix)) as rt:
        run_ids = [await rt.submit(linear_graph(NODES), input={"seed": i}) for i in range(30)]

        async def all_started() -> bool:
            return len({run for run, _, event, _ in _side(url, prefix) if event == "start"}) == 30

        await wait_until(all_started, 60)
        os.kill(worker.pid, signal.SIGSTOP)

        async def leases_ran_out() -> bool:
            with psycopg.connect(url) as conn:
                live = conn.execute(
                    f"SELECT count(*) FROM {schema}.runs WHERE owner IS NOT NULL "
                    "AND lease_expires > extract(epoch FROM clock_timestamp()) - 4"
                ).fetchone()
            return live is not None and live[0] == 0

        await wait_until(leases_ran_out, 30)
        os.kill(worker.pid, signal.SIGCONT)
        await _all_finished(rt, run_ids, 120)
        logs = {run_id: await rt.read_events(run_id) for run_id in run_ids}
        reports = [await rt.store.verify(run_id) for run_id in run_ids]  # type: ignore[union-attr]
    with psycopg.connect(url) as conn:
        epochs = conn.execute(
            f"SELECT claim_epoch FROM {schema}.runs WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchall()
    claim_changes = sum(int(epoch) for (epoch,) in epochs)
    assert claim_changes <= 2 * len(run_ids)  # claimed, and claimed again after the stall
    assert "this process stalled" in workers.log(worker)
    for events in logs.values():
        completions = Counter(e.body.node_id for e in events if isinstance(e.body, NodeCompleted))
        assert completions == Counter(NODES)
        assert sum(isinstance(e.body, RunFinished) for e in events) == 1
    assert all(report.ok for report in reports)
