"""Kill a run with SIGKILL at many points, resume it in a fresh process, compare."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import SqliteEventStore
from runtime.events import NodeCompleted, fold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
COMMITS = [f"commit:{n}" for n in range(1, 12)]
IN_NODES = [
    "node:a",
    "node:b",
    "node:c",
    "node:d",
    "node:e",
    "node:f1",
    "node:f2",
    "node:g",
    "node:h",
]
CHAINED = ["commit:3|commit:2", "node:c|commit:1", "commit:6|node:g", "node:e|node:f2|commit:2"]


def _run(db: Path, run_id: str, mode: str, kill: str, side: Path, ack: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.runtime.crash_graph",
            str(db),
            run_id,
            mode,
            kill,
            str(side),
            str(ack),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"crash_graph failed ({proc.returncode}):\n{proc.stderr}")
    return proc.returncode


async def _events(db: Path, run_id: str) -> list:  # type: ignore[type-arg]
    async with SqliteEventStore(db) as store:
        return await store.read_all(run_id)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list]:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("baseline")
    db = tmp / "base.db"
    assert _run(db, "r", "start", "-", tmp / "side", tmp / "ack") == 0
    import anyio

    state = fold(anyio.run(_events, db, "r"))
    assert state.status == "completed"
    return state.memory, state.path


@pytest.mark.parametrize("kills", COMMITS + IN_NODES + CHAINED)
async def test_killed_run_resumes_to_the_same_result(
    kills: str,
    tmp_path: Path,
    baseline: tuple[dict, list],  # type: ignore[type-arg]
) -> None:
    db, side, ack = tmp_path / "run.db", tmp_path / "side", tmp_path / "ack"
    plan = kills.split("|")
    mode = "start"
    for kill in plan:
        code = _run(db, "r", mode, kill, side, ack)
        assert code == -signal.SIGKILL, f"the kill point {kill} was never reached"
        events = await _events(db, "r")
        # no acknowledged event is lost
        acked = max((int(x) for x in ack.read_text().split()), default=0)
        assert (events[-1].seq if events else 0) >= acked
        completed_before = {e.body.node_id for e in events if isinstance(e.body, NodeCompleted)}
        side_before = len(side.read_text().splitlines())
        mode = "resume" if events else "start"
        if mode == "start":
            continue
        if fold(events).status == "completed":
            break  # killed after the final commit: nothing is left to resume
        code = _run(db, "r", "resume", "-", side, ack) if kill == plan[-1] else None
        if code is None:
            continue
        assert code == 0
        # no completed node runs twice
        after = side.read_text().splitlines()[side_before:]
        rerun = {line.split()[1] for line in after if line.startswith("start ")}
        twice = rerun & completed_before
        assert not twice, f"completed nodes ran again: {twice}"
    events = await _events(db, "r")
    state = fold(events)
    assert state.status == "completed"
    memory, path = baseline
    assert state.memory == memory
    assert sorted(state.path) == sorted(path)
    assert state.path[:2] == ["a", "b"] and state.path[-4:] == ["e", "f", "g", "h"]
    async with SqliteEventStore(db) as store:
        assert (await store.verify("r")).ok
