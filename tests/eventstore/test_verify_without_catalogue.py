"""``verify`` checks the chain of stored bytes: a process that imported only ``eventstore``
(no event type registered) verifies a run the runtime wrote, and still finds an edit."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import GraphSpec, NodeSpec, Runtime
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: eventstore alone, nothing of runtime imported.
VERIFY = textwrap.dedent(
    """
    import asyncio, json, sys
    from eventstore import open_store

    async def main(url, run_id):
        async with open_store(url) as store:
            report = await store.verify(run_id)
        assert "runtime" not in sys.modules, "the check imported runtime"
        print(json.dumps({"ok": report.ok, "checked": report.checked,
                          "broken_at": report.broken_at, "reason": report.reason}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def double(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"y": inputs["x"] * 2}


GRAPH = GraphSpec(
    id="double",
    nodes=[NodeSpec(id="d", function="double", input_keys=["x"], output_keys=["y"])],
    edges=[],
    entry_node="d",
)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_verify"
    drop_schemas(prefix)


def _verify_elsewhere(url: str, run_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", VERIFY, url, run_id],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def test_a_process_without_the_event_catalogue_verifies_a_run(store_url: str) -> None:
    async with Runtime(store_url, functions={"double": double}) as rt:
        handle = await rt.start(GRAPH, input={"x": 21})
        result = await handle.result()
        last_seq = (await rt.get_state(handle.run_id)).last_seq
    assert result.memory["y"] == 42
    report = _verify_elsewhere(store_url, handle.run_id)
    assert report["ok"] is True and report["checked"] == last_seq, report


async def test_a_process_without_the_event_catalogue_still_finds_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path, functions={"double": double}) as rt:
        handle = await rt.start(GRAPH, input={"x": 21})
        await handle.result()
    with sqlite3.connect(path) as conn:
        # Flip one byte of the last event's stored hash: the chain no longer holds there.
        seq, stored = conn.execute(
            "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        edited = bytes([stored[0] ^ 1]) + bytes(stored[1:])
        conn.execute("UPDATE events SET hash = ? WHERE seq = ?", (edited, seq))
    report = _verify_elsewhere(str(path), handle.run_id)
    assert report["ok"] is False and report["reason"] is not None
    assert report["broken_at"] is not None
