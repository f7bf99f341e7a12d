"""schemathesis fuzzes the API from its own /openapi.json over real HTTP: no answer is a 5xx."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from .support import AUTH, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_schemathesis_finds_no_server_error(tmp_path: Path) -> None:
    cli = Path(sys.executable).with_name("schemathesis")
    if not cli.exists() and shutil.which("schemathesis") is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    async with served(tmp_path / "runs.db") as s:
        # Some runs for the fuzzer's run ids and actions to land on.
        for graph in ("quick", "reviewed", "quick"):
            response = await s.client.post("/api/runs", json={"graph": graph}, headers=AUTH)
            await s.wait_status(response.json()["run_id"], "paused")
        command = [
            str(cli) if cli.exists() else "schemathesis",
            "run",
            f"{s.url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--header",
            f"Authorization: {AUTH['Authorization']}",
            "--max-examples",
            "25",
            "--seed",
            "1",
            "--workers",
            "1",
            "--generation-database",
            "none",
            # Event streams never end; tests/runtime/server/test_streams.py covers them.
            "--exclude-path-regex",
            "stream$",
            "--request-timeout",
            "20",
            "--no-color",
        ]
        result = await anyio.run_process(
            command, check=False, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"}
        )
        output = result.stdout.decode() + result.stderr.decode()
        assert result.returncode == 0, output
        generated = re.search(r"(\d+) generated, (\d+) passed", output)
        assert generated is not None and generated[1] == generated[2], output
        # The fuzzer reached the core: it started runs of its own (graph names are an enum).
        runs = (await s.client.get("/api/runs", params={"limit": 500})).json()["runs"]
        assert len(runs) > 3
