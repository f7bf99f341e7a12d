"""The DBOS side of ``python -m benchmarks executor``: a standalone script.

Run with the DBOS peer venv's interpreter (``benchmarks/peers/dbos-venv``); it must not
import magistrate packages (see ``_peer_protocol`` for the command line and the wire).
Each workload launches DBOS on a fresh SQLite system database file in WAL mode (the mode
is set on the file before DBOS opens it; SQLite keeps it in the file) with SQLite's
default ``synchronous=FULL``; the rounds of one workload share that launch (see
``launch``), and the next workload destroys it. Workloads mirror
``benchmarks/executor.py``:

- ``info``: versions, and the journal mode and synchronous level DBOS's connections see.
- ``linear`` (steps, runs, mode): ``runs`` sequential workflows of ``steps`` durable steps
  (``@DBOS.step``), each adding 1 to ``x``; ``mode`` "async" (``async def`` workflow and
  steps) or "sync" (plain functions). Times the runs only (one untimed warm-up run).
- ``concurrent`` (steps, runs, sleep_ms): ``runs`` async workflows started at once with
  ``DBOS.start_workflow_async``, each step sleeping ``sleep_ms``; wall time of the batch.
- ``step_outputs`` (steps, payload_bytes, serializer): one workflow of ``steps`` steps,
  each returning a ``payload_bytes`` string (DBOS checkpoints every step's output); the
  workflow returns only their count, so the output is not stored twice. ``serializer``
  "default" (pickle, base64) or "json" (DBOS's portable JSON). Reports the file size at
  rest (WAL checkpointed after DBOS is destroyed; any remaining -wal counted) and the
  size of the freshly launched, empty system database.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from _peer_protocol import payload, serve_main
from dbos import DBOS, DBOSConfig
from dbos._dbos import _get_dbos_instance
from dbos._serialization import DBOSPortableJSON

SIZE = {"n": 2048}


@DBOS.step()
def add_one(x: int) -> int:
    return x + 1


@DBOS.workflow()
def linear_sync(steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = add_one(x)
    return x


@DBOS.step()
async def add_one_async(x: int) -> int:
    return x + 1


@DBOS.workflow()
async def linear_async(steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = await add_one_async(x)
    return x


@DBOS.step()
async def sleep_add_one(x: int, sleep_s: float) -> int:
    await asyncio.sleep(sleep_s)
    return x + 1


@DBOS.workflow()
async def sleeping(steps: int, sleep_s: float) -> int:
    x = 0
    for _ in range(steps):
        x = await sleep_add_one(x, sleep_s)
    return x


@DBOS.step()
def message(i: int) -> str:
    return payload(i, SIZE["n"])


@DBOS.workflow()
def outputs(steps: int) -> int:
    return len([message(i + 1) for i in range(steps)])


def _file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def _checkpointed_size(path: str) -> int:
    """The file's size with its WAL folded in (any -wal left over counted too)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return _file_size(path) + _file_size(path + "-wal")


#: The live DBOS launch: the workload key it serves, its directory and file.
_LIVE: dict[str, str] = {}


def launch(key: str, serializer: str = "default") -> str:
    """DBOS launched on a fresh SQLite file in WAL mode; returns the file's path.

    Requests with the same ``key`` (the rounds of one workload) share one launch:
    ``DBOS.destroy`` takes about a second (its background threads poll once a second),
    which would otherwise make every round pay it.
    """
    if _LIVE.get("key") == key:
        return _LIVE["path"]
    shutdown()
    directory = tempfile.mkdtemp(prefix="dbos-bench-")
    path = os.path.join(directory, "dbos.sqlite")
    conn = sqlite3.connect(path)
    try:
        if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            raise RuntimeError("SQLite refused WAL mode")
    finally:
        conn.close()
    config: DBOSConfig = {
        "name": "magistrate-bench",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "WARNING",
        "console_log_level": "WARNING",
        "enable_otlp": False,
    }
    if serializer == "json":
        config["serializer"] = DBOSPortableJSON
    _LIVE.update(key=key, dir=directory, path=path)
    DBOS(config=config)
    DBOS.launch()
    return path


def shutdown() -> None:
    """Destroy the live launch (closing its connections) and delete its file."""
    if _LIVE:
        try:
            DBOS.destroy()
        finally:
            shutil.rmtree(_LIVE["dir"], ignore_errors=True)
            _LIVE.clear()


def _sequential(call: Callable[[], int], runs: int, expected: int) -> float:
    if call() != expected:  # warm-up, untimed (as on our side)
        raise AssertionError("the warm-up workflow returned a wrong value")
    start = time.perf_counter()
    for _ in range(runs):
        if call() != expected:
            raise AssertionError("a workflow returned a wrong value")
    return time.perf_counter() - start


def linear(steps: int = 10, runs: int = 20, mode: str = "async") -> dict[str, Any]:
    launch(f"linear-{mode}")
    if mode == "sync":
        elapsed = _sequential(lambda: linear_sync(steps), runs, steps)
    else:

        async def many() -> float:
            if await linear_async(steps) != steps:  # warm-up, untimed
                raise AssertionError("the warm-up workflow returned a wrong value")
            start = time.perf_counter()
            for _ in range(runs):
                if await linear_async(steps) != steps:
                    raise AssertionError("a workflow returned a wrong value")
            return time.perf_counter() - start

        elapsed = asyncio.run(many())
    return {"elapsed_s": elapsed, "steps": runs * steps}


def concurrent(steps: int = 10, runs: int = 200, sleep_ms: float = 10) -> dict[str, Any]:
    sleep_s = sleep_ms / 1000

    async def batch() -> float:
        if await sleeping(steps, sleep_s) != steps:
            raise AssertionError("the warm-up workflow returned a wrong value")
        start = time.perf_counter()
        handles = [await DBOS.start_workflow_async(sleeping, steps, sleep_s) for _ in range(runs)]
        results = await asyncio.gather(*(h.get_result() for h in handles))
        elapsed = time.perf_counter() - start
        if any(r != steps for r in results):
            raise AssertionError("a concurrent workflow did not run every step")
        return elapsed

    launch("concurrent")
    elapsed = asyncio.run(batch())
    return {"wall_s": elapsed, "steps": runs * steps}


def step_outputs(
    steps: int = 50, payload_bytes: int = 2048, serializer: str = "default"
) -> dict[str, Any]:
    SIZE["n"] = payload_bytes
    path = launch(f"outputs-{serializer}-{steps}-{payload_bytes}", serializer)
    try:
        # DBOS's own schema, before any workflow (its pool's connections are idle here).
        empty = _checkpointed_size(path)
        if outputs(steps) != steps:
            raise AssertionError("the workflow did not run every step")
        DBOS.destroy()  # closes DBOS's connections, so the checkpoint below folds all
        db = _checkpointed_size(path)
    finally:
        shutdown()
    return {"db_bytes": db, "payload_bytes": steps * payload_bytes, "empty_db_bytes": empty}


def info() -> dict[str, Any]:
    launch("linear-async")  # the first workload's launch, reused by its rounds
    engine = _get_dbos_instance()._sys_db.engine  # the system database's own
    with engine.connect() as conn:
        journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        synchronous = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    return {
        "versions": {"dbos": metadata.version("dbos")},
        "journal_mode": journal,
        "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(synchronous),
        "python": sys.version.split()[0],
    }


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "info": info,
    "linear": linear,
    "concurrent": concurrent,
    "step_outputs": step_outputs,
}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    name = request.pop("workload", None)
    fn = WORKLOADS.get(str(name))
    if fn is None:
        return {"error": f"unknown workload {name!r}"}
    try:
        return fn(**request)
    except Exception as exc:  # reported to the benchmark, which prints it
        shutdown()  # the next request starts from a fresh launch
        return {"error": f"{name}: {type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    try:
        code = serve_main(sys.argv[1:], __doc__, handle)
    finally:
        shutdown()
    sys.exit(code)
