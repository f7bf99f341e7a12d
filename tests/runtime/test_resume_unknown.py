"""Resuming a run the store does not hold raises RunNotFoundError and leaves nothing behind:
no claims row naming it (a claim was taken, then given up, before)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtime import RunNotFoundError, Runtime

pytestmark = pytest.mark.anyio


async def test_a_resume_of_an_unknown_run_claims_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path) as rt:
        with pytest.raises(RunNotFoundError):
            await rt.resume("nope")
        with pytest.raises(RunNotFoundError):
            await rt.approve("nope", by="ann")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT run_id FROM claims").fetchall() == []
