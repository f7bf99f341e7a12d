"""``python -m benchmarks workers [--quick]``: many worker processes on one PostgreSQL.

Three measurements, on the PostgreSQL server at ``$MAGISTRATE_BENCH_PG_URL`` (default: the
local server, database ``test``), each in schemas of its own that are dropped afterwards:

- throughput: N submitted runs of 10 durable function steps, executed by 1, 2 and 4 worker
  processes (``runtime.run_worker``). The runs are submitted before the workers start;
  throughput is completed runs over the span from the first completion to the last (so
  process start-up and submission are not counted);
- the same workload on DBOS Transact (its own virtual environment under
  ``benchmarks/peers/``): a workflow of 10 ``@DBOS.step`` steps enqueued on a DBOS queue
  that worker processes take from, its system database on the same PostgreSQL, measured
  the same way from its ``workflow_status`` table;
- recovery: a worker holding M live runs is killed with SIGKILL while a second worker
  waits; the time until every orphaned run is claimed again, for several lease lengths.

Prints ``workers.scaling_2_over_1``, ``workers.vs_dbos`` (ours over DBOS's throughput,
one worker process each) and ``workers.recovery_over_lease`` (the worst recovery time
over its lease length).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg import sql

from ._common import figure, print_table
from ._peers import ensure_dbos
from ._worker_process import graph

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("MAGISTRATE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_DBOS_SCRIPT = Path(__file__).resolve().parent / "_dbos_workers_peer.py"


def _reachable() -> str | None:
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def _drop(schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _query(text: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute(text, params).fetchall()  # type: ignore[arg-type]


def _start_worker(
    schema: str, worker_id: str, concurrency: int, lease: float, pause: float = 0.0
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks._worker_process",
            PG_URL,
            schema,
            worker_id,
            str(concurrency),
            str(lease),
            str(pause),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError(f"worker {worker_id} did not start (exit {process.wait()})")
    return process


def _stop(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _submit(schema: str, count: int, pause: float = 0.0) -> list[str]:
    from runtime import Runtime

    from ._worker_process import functions

    async with Runtime(f"{PG_URL}?schema={schema}", functions=functions(pause)) as rt:
        run_ids: list[str] = []

        async def submit(seed: int) -> None:
            run_ids.append(await rt.submit(graph(), input={"seed": seed}))

        async with anyio.create_task_group() as tg:
            for seed in range(count):
                tg.start_soon(submit, seed)
    return run_ids


def _wait_for(count_done: Any, total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while count_done() < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {count_done()} of {total} finished in {timeout:.0f}s")
        time.sleep(0.05)


def ours_throughput(workers: int, runs: int) -> float:
    """Runs per second with ``workers`` worker processes (see the module docstring)."""
    schema = f"bench_w{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[str]] = []
    try:
        anyio.run(_submit, schema, runs)
        for index in range(workers):
            processes.append(_start_worker(schema, f"bench-{index}", 50, 10.0))
        done = f"SELECT count(*) FROM {schema}.runs WHERE status = 'completed'"
        _wait_for(lambda: _query(done)[0][0], runs, 600)
        first, last = _query(
            f"SELECT min(updated), max(updated) FROM {schema}.runs WHERE status = 'completed'"
        )[0]
        return (runs - 1) / (last - first)
    finally:
        _stop(processes)
        _drop(schema)


def dbos_throughput(python: Path, workers: int, runs: int) -> float:
    """DBOS's runs per second on the same workload with ``workers`` processes."""
    schema = f"bench_d{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[str]] = []
    try:
        # The first worker creates DBOS's system tables; enqueue once they exist.
        processes.append(_dbos_worker(python, schema))
        _stop(processes)
        processes.clear()
        subprocess.run(
            [str(python), str(_DBOS_SCRIPT), "enqueue", PG_URL, schema, str(runs)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(workers):
            processes.append(_dbos_worker(python, schema))
        done = f"SELECT count(*) FROM {schema}.workflow_status WHERE status = 'SUCCESS'"
        _wait_for(lambda: _query(done)[0][0], runs, 600)
        first, last = _query(
            f"SELECT min(updated_at), max(updated_at) FROM {schema}.workflow_status "
            "WHERE status = 'SUCCESS'"
        )[0]
        return (runs - 1) / ((last - first) / 1000)
    finally:
        _stop(processes)
        _drop(schema)


def _dbos_worker(python: Path, schema: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [str(python), str(_DBOS_SCRIPT), "worker", PG_URL, schema, "50"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the DBOS worker did not start (exit {process.wait()})")
    return process


def recovery_seconds(lease: float, runs: int) -> float:
    """Seconds from SIGKILL of a worker holding ``runs`` live runs until another worker
    has claimed every one of them."""
    schema = f"bench_r{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[str]] = []
    try:
        # Slow steps: the runs are still live when the worker is killed.
        anyio.run(_submit, schema, runs, 1.0)
        doomed = _start_worker(schema, "doomed", runs, lease, pause=1.0)
        processes.append(doomed)
        held = f"SELECT count(*) FROM {schema}.runs WHERE owner = 'doomed'"
        _wait_for(lambda: _query(held)[0][0], runs, 60)
        processes.append(_start_worker(schema, "heir", runs, lease, pause=1.0))
        doomed.kill()
        killed = time.monotonic()
        taken = f"SELECT count(*) FROM {schema}.runs WHERE owner = 'heir'"
        _wait_for(lambda: _query(taken)[0][0], runs, 60 + 10 * lease)
        return time.monotonic() - killed
    finally:
        _stop(processes)
        _drop(schema)


def main(quick: bool) -> None:
    why = _reachable()
    if why is not None:
        print(f"no PostgreSQL server at {PG_URL} ({why}); nothing measured")
        return
    runs = 100 if quick else 400
    counts = (1, 2) if quick else (1, 2, 4)
    ours = {workers: ours_throughput(workers, runs) for workers in counts}
    python = ensure_dbos()
    dbos = dbos_throughput(python, 1, runs) if python is not None else None
    rows: list[list[object]] = [
        [f"magistrate, {w} worker{'s' if w > 1 else ''}", runs, ours[w], ours[w] / ours[1]]
        for w in counts
    ]
    if dbos is not None:
        rows.append(["DBOS 3.4.0, 1 worker", runs, dbos, dbos / ours[1]])
    print_table(
        f"10-step durable runs on PostgreSQL ({os.cpu_count()} cores; runs/s from the first "
        "completion to the last)",
        ["system", "runs", "runs/s", "x magistrate 1 worker"],
        rows,
    )
    leases = (1.0, 2.0) if quick else (1.0, 2.0, 4.0)
    recoveries = {lease: recovery_seconds(lease, 20) for lease in leases}
    print_table(
        "recovery after SIGKILL of a worker holding 20 live runs",
        ["lease s", "recovered in s", "x lease"],
        [[lease, seconds, seconds / lease] for lease, seconds in recoveries.items()],
    )
    figure("workers.scaling_2_over_1", ours[2] / ours[1], "x")
    if 4 in ours:
        figure("workers.scaling_4_over_1", ours[4] / ours[1], "x")
    if dbos is not None:
        figure("workers.vs_dbos", ours[1] / dbos, "x")
    else:
        print("workers.vs_dbos: unavailable (the DBOS peer could not be installed)")
    figure("workers.recovery_over_lease", max(s / lease for lease, s in recoveries.items()), "x")
