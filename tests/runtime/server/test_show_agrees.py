"""``magistrate show`` and the server agree on a run whose snapshot row was edited in the
store file: both say its check fails at the snapshot's seq (the dashboard shows the API's
``verify``), over real HTTP and a real CLI subprocess on one SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .support import AUTH, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

MAGISTRATE = Path(sys.executable).with_name("magistrate")


def _edit_snapshot(path: Path) -> int:
    """Append a byte to the one snapshot row, as someone with the file would; its seq."""
    conn = sqlite3.connect(path)
    try:
        seq, data = conn.execute("SELECT seq, data FROM snapshots").fetchone()
        conn.execute("UPDATE snapshots SET data = ? WHERE seq = ?", (bytes(data) + b" ", seq))
        conn.commit()
    finally:
        conn.close()
    return int(seq)


def _show(path: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MAGISTRATE), "show", run_id, "--store", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


async def test_show_fails_an_edited_snapshot_as_the_api_verify_does(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with served(path) as s:
        started = await s.client.post("/api/runs", json={"graph": "loop"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "completed")
        seq = _edit_snapshot(path)
        verify = (await s.client.get(f"/api/runs/{run_id}/verify")).json()
        assert verify["ok"] is False and verify["broken_at"] == seq
        assert "not bound to the log" in verify["reason"]

    shown = _show(path, run_id)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert f"chain:     BROKEN at seq {seq}: {verify['reason']}" in shown.stdout
    data = json.loads(_show(path, run_id, "--output", "json").stdout)
    assert data["chain"]["ok"] is False
    assert (data["chain"]["broken_at"], data["chain"]["reason"]) == (seq, verify["reason"])
    # What the run did is the fold of its log, whatever the snapshot row holds.
    assert data["status"] == "completed" and data["path"][-1] == "done"
