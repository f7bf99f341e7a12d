"""The command line loads only what the chosen command needs: ``--help`` reads the table
of commands alone, and a read of the store loads neither the engine nor the server, the
terminal renderer or an HTTP client. (How long start-up takes is measured by
``python -m benchmarks cli``, not asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli._app import build_parser
from runtime.cli._commands import COMMANDS

HEAVY = (
    "rich",
    "httpx",
    "starlette",
    "uvicorn",
    "psycopg",
    "prometheus_client",
    "runtime._runtime",
    "runtime.engine",
    "runtime.server",
)


def _loaded(argv: list[str], cwd: Path) -> tuple[list[str], str]:
    """The HEAVY modules loaded by ``magistrate ARGV`` (run in a fresh interpreter), and
    what it printed."""
    code = (
        "import contextlib, io, json, sys\n"
        "from runtime.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(json.dumps([sorted(m for m in {HEAVY!r} if m in sys.modules), out.getvalue()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cwd
    )
    loaded, shown = json.loads(done.stdout.splitlines()[-1])
    return loaded, shown


def test_help_lists_every_command_and_loads_none_of_them(tmp_path: Path) -> None:
    loaded, shown = _loaded(["--help"], tmp_path)
    assert loaded == []
    for name, (_, help_text) in COMMANDS.items():
        assert f"    {name} " in shown
        assert help_text.split()[0] in shown


def test_reading_runs_loads_no_engine_server_or_renderer(tmp_path: Path) -> None:
    graph = tmp_path / "hello.yaml"
    graph.write_text("id: hello\nentry_node: a\nnodes: [{id: a, function: steps:f}]\n")
    (tmp_path / "steps.py").write_text("def f(inputs):\n    return {}\n")
    ran = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "run", str(graph), "--store", "runs.db", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    loaded, shown = _loaded(["runs", "--store", "runs.db", "--output", "json"], tmp_path)
    assert loaded == []
    assert [run["status"] for run in json.loads(shown)["runs"]] == ["completed"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_is_registered_by_the_module_the_table_names(name: str) -> None:
    parser = build_parser(name)
    args = parser.parse_args([name, *_required(name)])
    assert callable(args.handler)
    assert args.command == name


def _required(name: str) -> list[str]:
    """Enough arguments for ``name`` to parse."""
    if name in ("run", "submit", "graph"):
        return ["graph.yaml"]
    if name in ("resume", "approve", "pause", "cancel", "show", "timeline", "state", "export"):
        return ["RUN"]
    if name == "fork":
        return ["RUN", "--at", "1"]
    return []
