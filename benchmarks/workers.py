"""``python -m benchmarks workers [--quick]``: many worker processes on one PostgreSQL.

Three measurements, on the PostgreSQL server at ``$MAGISTRATE_BENCH_PG_URL`` (default: the
local server, database ``test``), each in schemas of its own that are dropped afterwards:

- throughput: N submitted runs of 10 durable function steps, executed by 1, 2 and 4 worker
  processes (``runtime.run_worker``). The runs are submitted and the worker processes
  loaded first (each imports the runtime and opens the store once, so the driver, the
  pool and the engine are loaded); then all workers are let go at once, and throughput is
  N over the time from then until the last run completed (so process start-up and
  submission are not counted). Beside it: the CPU seconds the workers and the PostgreSQL
  server used, the whole machine's busy CPU seconds, and how many of the server's
  backends waited on a lock (sampled every 10 ms), from which the benchmark says what
  bounds the figure;
- the same workload on DBOS Transact (its own virtual environment under
  ``benchmarks/peers/``): a workflow of 10 ``@DBOS.step`` steps enqueued on a DBOS queue
  that worker processes take from, its system database on the same PostgreSQL, measured
  the same way from its ``workflow_status`` table;
- recovery: a worker holding M live runs is killed with SIGKILL while a second worker
  waits; the time until every orphaned run is claimed again, for several lease lengths.

Prints ``workers.scaling_2_over_1``, ``workers.vs_dbos`` (ours over DBOS's throughput,
one worker process each), ``workers.recovery_over_lease`` (the worst recovery time over
its lease length), and ``workers.scaling_ceiling`` with ``workers.bound``: how much faster
2 workers could be than 1 on this machine's cores at the CPU costs per run measured (see
:func:`capacity`), and what the 2-worker run was bound by.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
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
    schema: str,
    worker_id: str,
    concurrency: int,
    lease: float,
    pause: float = 0.0,
    *,
    gate: bool = False,
) -> subprocess.Popen[str]:
    """A worker process; with ``gate``, loaded and waiting for :func:`_release`."""
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
            *(["gate"] if gate else []),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE if gate else None,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    expected = "loaded" if gate else "ready"
    if process.stdout.readline().strip() != expected:
        raise RuntimeError(f"worker {worker_id} did not start (exit {process.wait()})")
    return process


def _release(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _server_pids() -> list[int]:
    """The PostgreSQL server's processes on this machine (none for a remote server)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm") as file:
                    if file.read().strip() == "postgres":
                        pids.append(int(name))
            except OSError:
                continue
    return pids


def _machine_busy() -> float:
    """CPU seconds every core of the machine spent not idle, since boot."""
    with open("/proc/stat") as file:
        ticks = [int(v) for v in file.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK


@dataclass
class Throughput:
    """One throughput measurement and what the machine did meanwhile."""

    workers: int
    runs: int
    seconds: float
    worker_cpu: float
    server_cpu: float
    machine_busy: float
    lock_waits: float  # mean number of our backends waiting on a lock, per sample

    @property
    def per_second(self) -> float:
        return self.runs / self.seconds

    @property
    def cpu_per_run(self) -> float:
        return (self.worker_cpu + self.server_cpu) / self.runs

    @property
    def others_cpu(self) -> float:
        return max(0.0, self.machine_busy - self.worker_cpu - self.server_cpu)


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


def ours_throughput(workers: int, runs: int) -> Throughput:
    """Runs per second with ``workers`` worker processes (see the module docstring)."""
    schema = f"bench_w{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[str]] = []
    try:
        anyio.run(_submit, schema, runs)
        for index in range(workers):
            processes.append(_start_worker(schema, f"bench-{index}", 50, 10.0, gate=True))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            servers = {pid: _cpu_seconds(pid) for pid in _server_pids()}
            ours = {p.pid: _cpu_seconds(p.pid) for p in processes}
            busy = _machine_busy()
            started = time.monotonic()
            _release(processes)
            waits: collections.Counter[str] = collections.Counter()
            samples = 0
            done = f"SELECT count(*) FROM {schema}.runs WHERE status = 'completed'"
            while conn.execute(done).fetchone() != (runs,):  # type: ignore[arg-type]
                if time.monotonic() - started > 600:
                    raise TimeoutError(f"{runs} runs did not finish in 600 s")
                for (kind,) in conn.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE state = 'active' "
                    "AND datname = current_database() AND pid <> pg_backend_pid()"
                ):
                    waits[str(kind)] += 1
                samples += 1
                time.sleep(0.01)
            seconds = time.monotonic() - started
            busy = _machine_busy() - busy
            worker_cpu = sum(_cpu_seconds(p.pid) - ours[p.pid] for p in processes)
            server_cpu = sum(_cpu_seconds(pid) - servers.get(pid, 0.0) for pid in _server_pids())
        return Throughput(
            workers,
            runs,
            seconds,
            worker_cpu,
            server_cpu,
            busy,
            waits["Lock"] / max(1, samples),
        )
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


def capacity(t: Throughput, cores: int) -> float:
    """The runs per second ``t``'s CPU costs allow on ``cores`` cores had the benchmark
    the machine to itself: each worker process runs on at most one core (one event loop),
    and the workers and the server together on at most ``cores``."""
    worker = t.worker_cpu / t.runs
    return min(t.workers / worker, cores / t.cpu_per_run)


def bound(one: Throughput, two: Throughput) -> tuple[float, str]:
    """How much faster 2 workers could be than 1 on this machine's cores at the CPU costs
    per run measured (whatever else ran meanwhile), and what bounded the 2-worker run."""
    cores = os.cpu_count() or 1
    ceiling = capacity(two, cores) / capacity(one, cores)
    busy = two.machine_busy / (cores * two.seconds)
    ours = (two.worker_cpu + two.server_cpu) / two.seconds
    others = two.others_cpu / two.seconds
    if busy >= 0.85:
        why = (
            f"cpu: the {cores} cores were {busy:.0%} busy (workers and server "
            f"{ours:.2f} cores, other processes {others:.2f}); a run costs "
            f"{two.cpu_per_run * 1000:.1f} CPU-ms with 2 workers, "
            f"{one.cpu_per_run * 1000:.1f} with 1"
        )
    elif two.lock_waits >= 0.5:
        why = f"locks: {two.lock_waits:.2f} backends waited on a lock on average"
    else:
        why = (
            f"latency: the cores were {busy:.0%} busy and {two.lock_waits:.2f} backends "
            "waited on a lock on average (round trips and commit flushes)"
        )
    return ceiling, why


def main(quick: bool) -> None:
    why = _reachable()
    if why is not None:
        print(f"no PostgreSQL server at {PG_URL} ({why}); nothing measured")
        return
    runs = 300 if quick else 1000
    counts = (1, 2) if quick else (1, 2, 4)
    ours = {workers: ours_throughput(workers, runs) for workers in counts}
    python = ensure_dbos()
    dbos = dbos_throughput(python, 1, runs) if python is not None else None
    one = ours[1].per_second
    rows: list[list[object]] = [
        [
            f"magistrate, {w} worker{'s' if w > 1 else ''}",
            runs,
            t.per_second,
            t.per_second / one,
            t.worker_cpu,
            t.server_cpu,
            t.others_cpu,
            t.lock_waits,
        ]
        for w, t in ours.items()
    ]
    if dbos is not None:
        rows.append(["DBOS 3.4.0, 1 worker", runs, dbos, dbos / one, "", "", "", ""])
    print_table(
        f"10-step durable runs on PostgreSQL ({os.cpu_count()} cores; runs/s from the "
        "workers' start to the last completion; CPU seconds in that span)",
        [
            "system",
            "runs",
            "runs/s",
            "x 1 worker",
            "worker CPU",
            "server CPU",
            "other CPU",
            "lock waits",
        ],
        rows,
    )
    leases = (1.0, 2.0) if quick else (1.0, 2.0, 4.0)
    recoveries = {lease: recovery_seconds(lease, 20) for lease in leases}
    print_table(
        "recovery after SIGKILL of a worker holding 20 live runs",
        ["lease s", "recovered in s", "x lease"],
        [[lease, seconds, seconds / lease] for lease, seconds in recoveries.items()],
    )
    figure("workers.scaling_2_over_1", ours[2].per_second / one, "x")
    if 4 in ours:
        figure("workers.scaling_4_over_1", ours[4].per_second / one, "x")
    if dbos is not None:
        figure("workers.vs_dbos", one / dbos, "x")
    else:
        print("workers.vs_dbos: unavailable (the DBOS peer could not be installed)")
    figure("workers.recovery_over_lease", max(s / lease for lease, s in recoveries.items()), "x")
    ceiling, what = bound(ours[1], ours[2])
    figure("workers.scaling_ceiling", ceiling, "x")
    print(f"workers.bound: {what}")
