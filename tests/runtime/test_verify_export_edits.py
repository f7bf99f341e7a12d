"""``docs/verify_export.py``, the auditor's script: an empty file, a line that is no
event, and a line edited so that its hash still matches while it reads otherwise (a key
given twice, a number with more digits than its float keeps) do not verify; the export
they were made from (floats at the edges of their range, negative zero, big integers,
unusual text) does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import Runtime
from runtime.reads import EventRecord
from runtime.testing import function_node, linear_graph

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "verify_export.py"
VALUES: dict[str, Any] = {
    "large": 1e308,
    "zero": -0.0,
    "tiny": 5e-324,
    "count": 2**70,
    "text": 'h\u00e9llo \u2028 \u2029 \x00 \x1f \x7f \U0001f600 \ufeff \\ "',
}


def _verify(path: Path) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout


async def _export(tmp_path: Path) -> list[str]:
    graph = linear_graph([function_node("copy", input_keys=["v"], output_keys=["w"])])
    async with Runtime(tmp_path / "runs.db", functions={"copy": lambda i: {"w": i["v"]}}) as rt:
        result = await (await rt.start(graph, input={"v": VALUES})).result()
        assert result.memory["w"] == VALUES
        events = await rt.read_events(result.run_id)
    # One line per event, as ``magistrate export`` writes it.
    return [msgspec.json.encode(EventRecord.of(event)).decode() for event in events]


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


async def test_an_empty_file_and_a_line_that_is_no_event_do_not_verify(tmp_path: Path) -> None:
    code, out = _verify(_write(tmp_path, "empty.jsonl", []))
    assert code == 1 and "no events" in out
    lines = await _export(tmp_path)
    code, out = _verify(_write(tmp_path, "cut.jsonl", [*lines[:2], lines[2][:40]]))
    assert code == 1 and out.startswith("BROKEN after 2 good events: line 3: not an exported")


async def test_an_edit_that_keeps_the_hash_but_reads_otherwise_does_not_verify(
    tmp_path: Path,
) -> None:
    lines = await _export(tmp_path)
    assert _verify(_write(tmp_path, "run.jsonl", lines)) == (0, f"ok: {len(lines)} events\n")
    written = next(i for i, line in enumerate(lines) if '"type":"memory.written"' in line)
    line = lines[written]
    edits = [
        # A reader that keeps a key's first value reads 5.
        line.replace('"value":{', '"value":5,"value":{'),
        # 1e308 and this are one float, but not one number to a decimal reader.
        line.replace('"large":1e308', '"large":1.0000000000000000001e308'),
    ]
    for edited in edits:
        assert edited != line
        code, out = _verify(_write(tmp_path, "edited.jsonl", [*lines[:written], edited]))
        assert code == 1, out
        assert f"seq {written + 1}: the line is not as magistrate export writes it" in out
