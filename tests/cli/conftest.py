"""A working directory with a graph file, its functions and a model script, and a way to
run the installed ``magistrate`` command in it as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

#: The graph files here name their functions and tools in ``triage_funcs``; a command that
#: reads the graph from the store imports from it only when allowed.
ALLOW = ("--allow-imports", "triage_funcs")

#: The console script installed with the package (``pip install -e .``).
MAGISTRATE = Path(sys.executable).with_name("magistrate")

FUNCTIONS = '''
import anyio


def load(inputs):
    return {"ticket": inputs["text"].strip()}


def act(inputs):
    return {"reply": f"[{inputs['category']}] approved by {inputs.get('approved_by')}"}


def explode(inputs):
    raise RuntimeError("the ledger is on fire")


async def slow(inputs):
    await anyio.sleep(60)
    return {"done": True}


async def patient(inputs, ctx):
    # Works until a pause is asked for, then returns: the run pauses after it.
    await ctx.set_output("progress", 1)
    with anyio.fail_after(60):
        while not ctx.pause_requested:
            await anyio.sleep(0.01)
    return {"progress": 2, "done": True}


def noted(inputs):
    return {"noted": True}


def lookup(customer: str) -> dict:
    """Look a customer up.

    Args:
        customer: the customer's name
    """
    return {"customer": customer, "tier": "gold"}
'''

GRAPH = """
id: triage
entry_node: load
terminal_nodes: [act]
pause_nodes: [act]
nodes:
  - id: load
    function: triage_funcs:load
    input_keys: [text]
    output_keys: [ticket]
  - id: classify
    kind: llm
    input_keys: [ticket]
    output_keys: [category]
    tools: ["triage_funcs:lookup"]
    success_criteria: [category is billing or technical]
  - id: act
    function: triage_funcs:act
    input_keys: [category, approved_by]
    output_keys: [reply]
edges:
  - {source: load, target: classify}
  - {source: classify, target: act}
"""

SCRIPT = """
turns:
  - tool_calls: [{name: lookup, arguments: {customer: ann}}]
  - tool_calls: [{name: set_output, arguments: {key: category, value: bill}}]
  - "done"
  - tool_calls: [{name: set_output, arguments: {key: category, value: billing}}]
  - "done now"
judge:
  - '{"verdict": "RETRY", "confidence": 0.7, "feedback": "category must be billing or technical"}'
  - '{"verdict": "ACCEPT", "confidence": 0.9}'
"""

FAILING = """
id: failing
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
  - id: boom
    function: "triage_funcs:explode"
    retry: {max_attempts: 2, initial_delay: 0.001, max_delay: 0.001, jitter: 0.0}
edges:
  - {source: load, target: boom}
"""

SLOW = """
id: slow
entry_node: wait
nodes:
  - {id: wait, function: "triage_funcs:slow", output_keys: [done]}
"""

PATIENT = """
id: patient
entry_node: wait
nodes:
  - {id: wait, function: "triage_funcs:patient", output_keys: [progress, done]}
  - {id: after, function: "triage_funcs:noted", output_keys: [noted]}
edges:
  - {source: wait, target: after}
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Workdir:
    path: Path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.pop("MAGISTRATE_STORE", None)
        env.update(extra or {})
        return env

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 45) -> Result:
        """Run ``magistrate ARGS`` in the directory; return its exit code and output."""
        done = subprocess.run(
            [str(MAGISTRATE), *args],
            cwd=self.path,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(MAGISTRATE), *args],
            cwd=self.path,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.write_text(text)
        return path


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store the command's processes share: a SQLite file, then a new PostgreSQL schema
    (dropped afterwards). A test module may define its own."""
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield f"{url}?schema={prefix}_cli"
    drop_schemas(prefix)


@pytest.fixture
def workdir(tmp_path: Path) -> Workdir:
    work = Workdir(tmp_path)
    work.write("triage_funcs.py", FUNCTIONS)
    work.write("graph.yaml", GRAPH)
    work.write("script.yaml", SCRIPT)
    work.write("failing.yaml", FAILING)
    work.write("slow.yaml", SLOW)
    work.write("patient.yaml", PATIENT)
    return work


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def ok(result: Result, code: int = 0) -> Result:
    assert result.code == code, f"exit {result.code}, expected {code}\n{result.out}\n{result.err}"
    return result


__all__: Sequence[str] = ["ALLOW", "MAGISTRATE", "Result", "Workdir", "lines", "ok"]
