"""A worker whose store refuses a run's appends (a full disk) leaves the run running and
claims it again less and less often, saying so once, instead of re-running its node
without end; once the store takes the appends again, it executes the run to its end.

The worker is a process whose files may not grow past ``LIMIT`` bytes (``RLIMIT_FSIZE``;
Python ignores ``SIGXFSZ``, so a write past it fails as on a full disk): the small events
of a resume fit, the big node's completion does not, until ``SIGUSR1`` lifts the limit."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from runtime import Runtime
from runtime.events import NodeCompleted, RunResumed
from runtime.testing import linear_graph
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio

#: Below what the big node's output needs, above everything else the run writes.
LIMIT = 1_000_000

_WORKER = r"""
import asyncio, logging, resource, secrets, signal, sys

from runtime import RecoveryConfig, Runtime

soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), hard))
# SIGUSR1: the disk has room again.
signal.signal(signal.SIGUSR1, lambda *_: resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard)))
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def small(inputs):
    return {"ok": True}


def big(inputs):
    # About 1.5 MB once stored (random hex compresses by half).
    return {"blob": secrets.token_bytes(1_500_000).hex()}


async def main():
    functions = {"small": small, "big": big}
    async with Runtime(sys.argv[1], functions=functions, recovery=RecoveryConfig(interval=0.05)):
        await asyncio.Event().wait()


asyncio.run(main())
"""


ROOT = Path(__file__).resolve().parents[2]


def _worker(path: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(LIMIT)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    worker.terminate()
    worker.wait(timeout=30)


async def _count(rt: Runtime, run_id: str, kind: type) -> int:
    return sum(isinstance(e.body, kind) for e in await rt.read_events(run_id))


async def test_a_worker_whose_store_refuses_a_run_backs_off_and_runs_it_once_it_has_room(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    log = tmp_path / "worker.log"
    async with Runtime(path) as rt:
        run_id = await rt.submit(linear_graph(["small", "big"]))
        worker = _worker(path, log)
        try:
            with anyio.fail_after(50):

                async def resumed(times: int) -> bool:
                    return await _count(rt, run_id, RunResumed) >= times

                # Claimed and refused, claimed again at once (a first failure may be a blip),
                # then after 1 s, then after 2 s: the back-off has happened twice.
                await wait_until(lambda: resumed(4), 30)
                before = await _count(rt, run_id, RunResumed)
                # A window in which a worker that does not back off resumes the run dozens of
                # times; this one claims it again 4 s after the last refusal.
                await anyio.sleep(3)
                during = await _count(rt, run_id, RunResumed)
                state = await rt.get_state(run_id)
                assert during - before <= 1, (before, during)
                assert state.status == "running" and state.path == ["small"]
                assert await _count(rt, run_id, NodeCompleted) == 1

                worker.send_signal(signal.SIGUSR1)  # room again

                async def finished() -> bool:
                    return (await rt.get_state(run_id)).status != "running"

                await wait_until(finished, 30)
        finally:
            _stop(worker)
        state = await rt.get_state(run_id)
        assert state.status == "completed" and state.path == ["small", "big"]
        assert rt.store is not None and (await rt.store.verify(run_id)).ok
    text = log.read_text()
    # Said once, with the store's error and what happens next, however often it waited.
    [line] = [ln for ln in text.splitlines() if "stays running" in ln]
    assert run_id in line and "append failed" in line, line
