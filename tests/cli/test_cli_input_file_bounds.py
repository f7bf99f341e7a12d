"""``magistrate run --input-file`` with a file past the bounds of a run's input: a usage
error (exit 2) naming the file or the key, and no run recorded."""

from __future__ import annotations

from .conftest import Workdir, ok

GRAPH = """
id: echo
entry_node: only
nodes:
  - {id: only, function: "triage_funcs:noted"}
"""

#: A few lines of YAML whose aliases make a value of 9**8 strings (shared lists).
ALIASES = "".join(
    f"{name}: &{name} [{', '.join([f'*{prior}'] * 9 if prior else ['lol'] * 9)}]\n"
    for prior, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True)
)


def _no_runs(workdir: Workdir) -> None:
    listed = workdir.run("runs")
    assert listed.code != 0 or len(listed.out.splitlines()) <= 1, listed.out


def test_an_input_file_nested_too_deep_is_a_usage_error(workdir: Workdir) -> None:
    workdir.write("echo.yaml", GRAPH)
    workdir.write("deep.json", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = ok(workdir.run("run", "echo.yaml", "--input-file", "deep.json", "-q"), 2)
    assert done.err.startswith("magistrate: error: input file deep.json is not valid"), done.err
    _no_runs(workdir)


def test_an_input_file_whose_aliases_make_a_huge_value_is_refused(workdir: Workdir) -> None:
    workdir.write("echo.yaml", GRAPH)
    workdir.write("aliases.yaml", ALIASES)
    done = ok(workdir.run("run", "echo.yaml", "--input-file", "aliases.yaml", "-q"), 2)
    assert "memory key 'h'" in done.err and "past 10000000 items" in done.err, done.err
    _no_runs(workdir)
