"""A divergence's reason shows where the two sides differ: values whose shortened forms
look the same (a long text changed in its middle, a dict changed past the keys its repr
shows, a judge's long feedback) are shown around their first difference, on one bounded
line, while the report keeps both events whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import GraphSpec, JudgeContext, JudgeVerdict, NodeSpec, ReplayReport, Runtime
from runtime.testing import ScriptedProvider, reply, tool_call

pytestmark = pytest.mark.anyio

BASE = "The quick brown fox jumps over the lazy dog. " * 5  # 225 characters


def _text(mark: str) -> str:
    """BASE with its character at offset 100 made ``mark``."""
    return BASE[:100] + mark + BASE[101:]


def _one(node: NodeSpec) -> GraphSpec:
    return GraphSpec(id="messages", nodes=[node], edges=[], entry_node=node.id)


async def _rerun(store: Path, graph: GraphSpec, recorded: Any, today: Any) -> ReplayReport:
    """Record ``graph`` with the function ``recorded``, replay it running ``today``."""
    async with Runtime(store, functions={"write": recorded}) as rt:
        result = await (await rt.start(graph)).result()
        assert result.status == "completed", result
    async with Runtime(store, functions={"write": today}) as rt:
        return await rt.replay(result.run_id, rerun_functions=True)


def _one_line(reason: str) -> None:
    assert "\n" not in reason and len(reason) < 400, reason


async def test_a_text_changed_in_its_middle_is_shown_where_it_differs(tmp_path: Path) -> None:
    graph = _one(NodeSpec(id="w", function="write", output_keys=["out"]))
    report = await _rerun(
        tmp_path / "runs.db", graph, lambda _: {"out": _text("A")}, lambda _: {"out": _text("B")}
    )
    (divergence,) = report.divergences
    assert divergence.kind == "memory.written"
    reason = divergence.reason
    assert reason.startswith("memory key `out` is now written '...")
    new, old = reason.split(" where ")
    assert "quick Brown fox" in new and "quick Arown fox" in old
    assert old.endswith("...' was recorded (first difference at offset 100)")
    _one_line(reason)
    # The report keeps both values whole.
    assert divergence.recorded is not None and divergence.recorded["value"] == _text("A")
    assert divergence.now is not None and divergence.now["value"] == _text("B")


async def test_a_dict_changed_past_the_keys_its_repr_shows(tmp_path: Path) -> None:
    def doc(mark: str) -> dict[str, Any]:
        return {"out": {"a": 1, "b": 2, "c": 3, "d": 4, "e": mark}}

    graph = _one(NodeSpec(id="w", function="write", output_keys=["out"]))
    report = await _rerun(tmp_path / "runs.db", graph, lambda _: doc("A"), lambda _: doc("B"))
    reason = report.divergences[0].reason
    assert reason == (
        """memory key `out` is now written '...,"b":2,"c":3,"d":4,"e":"B"}' where """
        """'...,"b":2,"c":3,"d":4,"e":"A"}' was recorded """
        "(first difference at offset 30 of their JSON)"
    )


async def test_an_event_that_reads_the_same_shortened_shows_where_it_differs(
    tmp_path: Path,
) -> None:
    def setting(mark: str) -> Any:
        async def write(inputs: dict[str, Any], ctx: Any) -> dict[str, Any]:
            await ctx.set_output("note", _text(mark))
            return {"done": True}

        return write

    graph = _one(NodeSpec(id="w", function="write", output_keys=["done"]))
    report = await _rerun(tmp_path / "runs.db", graph, setting("A"), setting("B"))
    (divergence,) = report.divergences
    assert divergence.kind == "output.set"
    reason = divergence.reason
    assert reason.startswith("now output.set {'key': 'note', ")
    new, old = reason.split(" where ")
    assert "quick Brown fox" in new and "quick Arown fox" in old
    assert "quick Brown fox" not in old and "quick Arown fox" not in new
    assert old.endswith("was recorded (first difference at offset 157 of their JSON)")
    _one_line(reason)
    assert divergence.recorded is not None and divergence.recorded["value"] == _text("A")


class _Judge:
    """Accepts once the answer is set, with ``feedback``."""

    def __init__(self, feedback: str) -> None:
        self.feedback = feedback

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        if context.accumulator.get("answer"):
            return JudgeVerdict(action="accept", level="custom", feedback=self.feedback)
        return JudgeVerdict(action="retry", level="custom", feedback="set the answer")


async def _judged(store: Path, recorded: str, today: str) -> ReplayReport:
    """Record a run whose custom judge accepts with ``recorded`` feedback, replay it with
    the judge giving ``today``."""
    graph = _one(NodeSpec(id="ask", kind="llm", output_keys=["answer"], judge="j"))
    model = ScriptedProvider(
        [reply("", tool_call("set_output", key="answer", value="42")), reply("done")]
    )
    async with Runtime(store, provider=model, judges={"j": _Judge(recorded)}) as rt:
        run_id = (await (await rt.start(graph)).result()).run_id
    async with Runtime(store, judges={"j": _Judge(today)}) as rt:
        return await rt.replay(run_id)


async def test_a_long_judge_feedback_changed_at_its_end(tmp_path: Path) -> None:
    report = await _judged(tmp_path / "runs.db", "x" * 170 + "A", "x" * 170 + "B")
    (divergence,) = report.divergences
    assert divergence.kind == "judge.verdict"
    window = "x" * 24
    assert divergence.reason == (
        f"verdict ACCEPT at level custom: '...{window}B' (recorded: level custom: "
        f"'...{window}A'; first difference at offset 170)"
    )


async def test_a_feedback_of_many_lines_is_one_line(tmp_path: Path) -> None:
    recorded = "too vague:\n- no dates\n- no budget"
    report = await _judged(tmp_path / "runs.db", recorded, "too vague:\n- no dates")
    assert report.divergences[0].reason == (
        "verdict ACCEPT at level custom: too vague: - no dates "
        "(recorded: level custom: too vague: - no dates - no budget)"
    )
    assert report.divergences[0].recorded is not None
    assert report.divergences[0].recorded["feedback"] == recorded


async def test_a_large_nested_value_stays_one_bounded_line(tmp_path: Path) -> None:
    def deep(mark: str) -> dict[str, Any]:
        text = mark + "line one\nline two\n" * 20
        return {
            "out": {
                f"k{i}": [{f"x{j}": text for j in range(4)} for _ in range(6)] for i in range(4)
            }
        }

    graph = _one(NodeSpec(id="w", function="write", output_keys=["out"]))
    report = await _rerun(tmp_path / "runs.db", graph, lambda _: deep("A"), lambda _: deep("B"))
    reason = report.divergences[0].reason
    assert reason.startswith("memory key `out` is now written {'k0': [{'x0': 'Bline one\\nline")
    _one_line(reason)


FUNCTIONS = """
import os

BASE = "The quick brown fox jumps over the lazy dog. " * 5


def write(inputs):
    mark = os.environ["MARK"]
    return {"out": BASE[:100] + mark + BASE[101:]}
"""

GRAPH = """
id: notes
entry_node: w
nodes:
  - {id: w, function: "notes_funcs:write", output_keys: [out]}
"""


def _magistrate(cwd: Path, mark: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MAGISTRATE_STORE"}
    return subprocess.run(
        [str(Path(sys.executable).with_name("magistrate")), *args],
        cwd=cwd,
        env={**env, "MARK": mark},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_the_cli_shows_where_a_long_text_differs(tmp_path: Path) -> None:
    (tmp_path / "notes_funcs.py").write_text(FUNCTIONS)
    (tmp_path / "notes.yaml").write_text(GRAPH)
    allow = ("--allow-imports", "notes_funcs")
    ran = _magistrate(tmp_path, "A", "run", "notes.yaml", *allow, "-q", "--output", "json")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    replay = ("replay", run_id, "--rerun-functions", *allow)
    shown = _magistrate(tmp_path, "B", *replay)
    assert shown.returncode == 1, shown.stderr
    head, line = shown.stdout.splitlines()
    assert head == f"run {run_id}: diverges against graph notes"
    assert line.startswith("  seq ") and "[memory.written] memory key `out` is now written" in line
    assert "quick Brown fox" in line and "quick Arown fox" in line
    assert line.endswith("was recorded (first difference at offset 100)")
    as_json = _magistrate(tmp_path, "B", *replay, "--output", "json")
    (divergence,) = json.loads(as_json.stdout)["divergences"]
    assert divergence["reason"] == line.split("] ", 1)[1]
    assert divergence["recorded"]["value"] == _text("A")
    assert divergence["now"]["value"] == _text("B")
