"""``python -m benchmarks cli [--quick]``: how long the ``magistrate`` command takes to start.

Each command runs as a subprocess of this interpreter (``python -m runtime.cli``, what the
``magistrate`` script runs), in a temporary directory holding a small SQLite store of a
few completed runs and a graph file; the figure is the median wall time of several runs
(7, or 3 with ``--quick``), from spawning the process to its exit:

- ``magistrate --help``: the command table only (no command's module is imported);
- ``magistrate runs``: the store opened and one page of runs listed;
- ``magistrate graph FILE``: a graph file loaded and drawn;
- ``python -c pass``: the interpreter alone, the floor under every figure.

Prints ``cli.help_s``, ``cli.runs_s``, ``cli.graph_s`` and ``cli.python_s`` (seconds).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from runtime import GraphSpec, NodeSpec, Runtime

from ._common import figure, print_table

__all__ = ["main"]

_GRAPH = """\
id: hello
entry_node: greet
nodes: [{id: greet, function: "hello:greet", input_keys: [name], output_keys: [greeting]}]
"""


def _greet(inputs: dict[str, str]) -> dict[str, str]:
    return {"greeting": f"Hello, {inputs['name']}!"}


async def _fill(store: Path, runs: int) -> None:
    graph = GraphSpec(
        id="hello",
        entry_node="greet",
        nodes=[
            NodeSpec(id="greet", function="greet", input_keys=["name"], output_keys=["greeting"])
        ],
    )
    async with Runtime(str(store), functions={"greet": _greet}) as rt:
        for i in range(runs):
            await (await rt.start(graph, input={"name": f"n{i}"})).result()


def _wall(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(quick: bool) -> None:
    repeats = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        store = here / "runs.db"
        anyio.run(_fill, store, 20)
        (here / "hello.yaml").write_text(_GRAPH)
        cli = [sys.executable, "-m", "runtime.cli"]
        commands = {
            "help": [*cli, "--help"],
            "runs": [*cli, "runs", "--store", str(store)],
            "graph": [*cli, "graph", "hello.yaml"],
            "python": [sys.executable, "-c", "pass"],
        }
        _wall(commands["help"], here)  # compiled bytecode written, files in the page cache
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeats):  # interleaved, so a busy moment touches every command
            for name, argv in commands.items():
                times[name].append(_wall(argv, here))
    shown = {
        "help": "magistrate --help",
        "runs": "magistrate runs (20 runs, SQLite)",
        "graph": "magistrate graph hello.yaml",
        "python": "python -c pass",
    }
    rows = [[shown[name], statistics.median(ts), min(ts), max(ts)] for name, ts in times.items()]
    print_table(
        f"CLI start-up, wall time of a subprocess ({repeats} runs each)",
        ["command", "median s", "min s", "max s"],
        rows,
    )
    for name, ts in times.items():
        figure(f"cli.{name}_s", statistics.median(ts), "s")
