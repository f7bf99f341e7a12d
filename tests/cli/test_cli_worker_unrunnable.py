"""A worker process that cannot execute a run (its graph imports a module the worker does
not allow) records why once, backs off instead of claiming it again and again, and says
which option is missing; ``show`` says it; a worker that can execute it then does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest

from runtime import GraphSpec, NodeSpec, Runtime
from runtime.events import RunUnrunnable
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url, wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.cli.worker_functions"
GRAPH = GraphSpec(
    id="double",
    nodes=[NodeSpec(id="d", function=f"{MODULE}:double")],
    edges=[],
    entry_node="d",
)


@pytest.fixture
def schema() -> Iterator[str]:
    pg_url()
    prefix = fresh_prefix()
    yield f"{prefix}_cli"
    drop_schemas(prefix)


def _worker(store_url: str, log: Path, *options: str) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime.cli",
                "worker",
                "--store",
                store_url,
                "--poll",
                "0.05",
                *options,
            ],
            cwd=ROOT,
            stderr=stderr,
        )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    worker.wait(timeout=30)


def _claims(schema: str, run_id: str) -> int:
    """How many times the run was claimed (its claim epoch in the store)."""
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute(
            f'SELECT claim_epoch FROM "{schema}".runs WHERE run_id = %s', (run_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _unrunnable(rt: Runtime, run_id: str) -> list[RunUnrunnable]:
    return [e.body for e in await rt.read_events(run_id) if isinstance(e.body, RunUnrunnable)]


async def test_a_worker_that_cannot_execute_a_run_records_why_once_and_backs_off(
    schema: str, tmp_path: Path
) -> None:
    store_url = f"{pg_url()}?schema={schema}"
    async with Runtime(store_url, allow_imports=[MODULE]) as rt:
        run_id = await rt.submit(GRAPH, input={"x": 4})
        first = _worker(store_url, tmp_path / "first.log")
        try:

            async def recorded() -> bool:
                return bool(await _unrunnable(rt, run_id))

            await wait_until(recorded, 30)
            claimed = await anyio.to_thread.run_sync(_claims, schema, run_id)
            await anyio.sleep(3)  # a spinning worker claims it dozens of times meanwhile
            claimed_later = await anyio.to_thread.run_sync(_claims, schema, run_id)
        finally:
            _stop(first)
        # Backed off: 1 s, then 2 s, ... between claims, not ~12 claims a second.
        assert claimed_later - claimed <= 3, (claimed, claimed_later)

        second = _worker(store_url, tmp_path / "second.log")
        try:

            async def claimed_again() -> bool:
                return await anyio.to_thread.run_sync(_claims, schema, run_id) > claimed_later

            await wait_until(claimed_again, 30)
            show = await anyio.run_process(
                [sys.executable, "-m", "runtime.cli", "show", run_id, "--store", store_url],
                cwd=ROOT,
            )
        finally:
            _stop(second)
        # One event per distinct reason, whoever claims it and however often.
        (event,) = await _unrunnable(rt, run_id)
        assert "--allow-imports tests.cli.worker_functions" in event.reason
        assert (await rt.get_state(run_id)).status == "running"
        assert (await rt.get_state(run_id)).unrunnable == [event.reason]
        text = show.stdout.decode()
        assert f"blocked:   a worker cannot execute it: {event.reason}" in text

        log = (tmp_path / "first.log").read_text()
        warnings = [line for line in log.splitlines() if "cannot execute it" in line]
        assert len(warnings) == 1 and "--allow-imports" in warnings[0], log
        assert "Runtime(allow_imports" not in log

        able = _worker(store_url, tmp_path / "able.log", "--allow-imports", MODULE)
        try:

            async def completed() -> bool:
                return (await rt.get_state(run_id)).status == "completed"

            await wait_until(completed, 30)
        finally:
            _stop(able)
        assert (await rt.get_state(run_id)).memory["x"] == 8
