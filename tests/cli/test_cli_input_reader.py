"""Input files, ``--input`` values and model scripts are read by the rules graph files are
read by (no key twice, no NaN, YAML 1.2 numbers), without a graph file's bounds; an input
the library would refuse is refused before any store is made."""

from __future__ import annotations

import json

import pytest

from .conftest import Result, Workdir, ok

ECHO = """
id: echo
entry_node: only
nodes:
  - {id: only, function: "triage_funcs:noted"}
"""

BIG = "123456789012345678901234567890"  # 30 digits: past 64 bits and a spec's 20 digits


def _refused(workdir: Workdir, result: Result, says: str) -> None:
    """Exit 2, ``says`` on the one line of stderr, nothing on stdout, and no store made."""
    assert result.code == 2, f"exit {result.code}\n{result.out}\n{result.err}"
    assert result.out == ""
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert says in result.err, result.err
    assert not (workdir.path / "magistrate.db").exists()  # refused before the store is made


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("in.json", '{"x": 1,\n "x": 2}', "duplicate key 'x' (line 2, column 2)"),
        ("in.yaml", "x: 1\ny: 2\nx: 3\n", "duplicate key 'x' (line 3, column 1)"),
        ("in.toml", "x = 1\ny = 2\nx = 3\n", "Cannot overwrite a value (at line 3"),
    ],
)
def test_a_key_twice_in_an_input_file_is_refused_naming_it(
    workdir: Workdir, name: str, text: str, says: str
) -> None:
    workdir.write("echo.yaml", ECHO)
    workdir.write(name, text)
    done = workdir.run("run", "echo.yaml", "--input-file", name, "-q")
    _refused(workdir, done, f"magistrate: error: input file {name} is not valid: {says}")


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("dup.json", '{"turns": ["a"],\n "turns": ["b"]}', "(line 2, column 2)"),
        ("dup.yaml", "turns:\n  - a\nturns:\n  - b\n", "(line 3, column 1)"),
    ],
)
def test_a_key_twice_in_a_script_is_refused_naming_it(
    workdir: Workdir, name: str, text: str, says: str
) -> None:
    workdir.write(name, text)
    done = workdir.run("run", "graph.yaml", "--input", "text=hi", "--provider", f"scripted:{name}")
    _refused(workdir, done, f"script {name} is not valid: duplicate key 'turns' {says}")


def test_an_input_file_is_read_as_a_graph_file_is_without_its_bounds(workdir: Workdir) -> None:
    workdir.write("echo.yaml", ECHO)
    pad = "x" * 1_100_000  # past the 1 MiB a graph file may hold
    workdir.write("in.yaml", f"small: 1e-9\nquoted: '1e-9'\nbig: {BIG}\npad: {pad}\n")
    done = ok(workdir.run("run", "echo.yaml", "--input-file", "in.yaml", "--output", "json"))
    memory = json.loads(done.out)["memory"]
    assert memory["small"] == 1e-9 and memory["quoted"] == "1e-9"  # YAML 1.2's numbers
    assert memory["big"] == int(BIG) and memory["pad"] == pad
    # A graph file keeps its bounds: the same integer in it is refused, before any store.
    (workdir.path / "magistrate.db").unlink()
    workdir.write("big.yaml", ECHO + f"max_steps: {BIG}\n")
    done = workdir.run("run", "big.yaml", "-q")
    _refused(workdir, done, "big.yaml: invalid YAML: integer of 30 digits (at most 20) (line 6")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--input", "x=NaN"], "--input x is not valid: NaN is not a finite number"),
        (["--input", "x=-Infinity"], "--input x is not valid: -Infinity is not a finite number"),
        (
            ["--input-file", "nan.json"],
            "input file nan.json is not valid: NaN is not a finite number",
        ),
        (["--input-file", "nan.yaml"], "input file nan.yaml is not valid: x.y: inf is not a"),
        (["--input-file", "keys.yaml"], "input keys are memory keys (str), got the int 1"),
        (["--input-file", "lone.json"], "memory key 'x': value is a string with a lone surrogate"),
        (["--input", 'x={"a": [1], "a": 2}'], "--input x is not valid: duplicate key 'a'"),
    ],
)
def test_an_input_the_library_refuses_is_refused_before_a_store_is_made(
    workdir: Workdir, given: list[str], says: str
) -> None:
    workdir.write("echo.yaml", ECHO)
    workdir.write("nan.json", '{"x": NaN}')
    workdir.write("nan.yaml", "x: {y: .inf}\n")
    workdir.write("keys.yaml", "x: 0\n1: one\n")
    workdir.write("lone.json", '{"x": "\\ud800"}')
    _refused(workdir, workdir.run("run", "echo.yaml", *given, "-q"), says)


def test_nan_given_for_text_says_how_to_give_the_text(workdir: Workdir) -> None:
    workdir.write("echo.yaml", ECHO)
    done = workdir.run("submit", "echo.yaml", "--input", "x=NaN")
    _refused(workdir, done, """for the text, give a JSON string: --input 'x="NaN"'""")
    # What is no JSON at all stays text, as before.
    done = ok(workdir.run("run", "echo.yaml", "--input", "x={nope", "--output", "json"))
    assert json.loads(done.out)["memory"]["x"] == "{nope"


def test_a_toml_input_file_is_read_as_toml(workdir: Workdir) -> None:
    workdir.write("echo.yaml", ECHO)
    workdir.write("in.toml", 'text = "hi"\nsmall = 1e-9\n[nested]\nn = 3\n')
    done = ok(workdir.run("run", "echo.yaml", "--input-file", "in.toml", "--output", "json"))
    memory = json.loads(done.out)["memory"]
    assert (memory["text"], memory["small"], memory["nested"]) == ("hi", 1e-9, {"n": 3})
