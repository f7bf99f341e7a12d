"""A graph file with a mistake is refused by ``magistrate graph`` and ``magistrate run`` with
one error per mistake, naming the field, the file's line and what to write instead; a
refused ``run`` records nothing."""

from __future__ import annotations

from .conftest import Workdir, ok

MISSPELT = """\
id: misspelt
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
  - {id: billing, function: "triage_funcs:noted", output_keys: [noted]}
edges:
  - source: load
    target: biling
"""

LOOP = """\
id: loop
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
  - {id: again, function: "triage_funcs:noted", output_keys: [noted]}
edges:
  - {source: load, target: again}
  - {source: again, target: load}
"""

TYPES = """\
id: types
entry_node: load
nodes:
  - {id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}
  - {id: long, function: "triage_funcs:noted", output_keys: [noted]}
edges:
  - source: load
    target: long
    condition: conditional
    expression: "len(ticket) > '40'"
"""


def _one_problem(err: str) -> str:
    lines = err.strip().splitlines()
    assert lines[0] == "magistrate: error: 1 problem in graph spec:", err
    assert "Traceback" not in err
    return lines[1]


def test_a_misspelt_node_id_is_one_error_with_its_line(workdir: Workdir) -> None:
    workdir.write("misspelt.yaml", MISSPELT)
    for command in (("graph", "misspelt.yaml"), ("run", "misspelt.yaml")):
        result = ok(workdir.run(*command), 2)
        assert _one_problem(result.err) == (
            "  - edges[0].target: unknown node 'biling'; did you mean 'billing'? (line 8, column 5)"
        )
        assert result.err.strip().splitlines()[-1] == "  in misspelt.yaml"
    assert not (workdir.path / "magistrate.db").exists()


def test_a_loop_no_run_can_leave_is_refused_before_it_runs(workdir: Workdir) -> None:
    workdir.write("loop.yaml", LOOP)
    result = ok(workdir.run("run", "loop.yaml", "--input", "text=hi"), 2)
    problem = _one_problem(result.err)
    assert problem.startswith(
        "  - nodes[0].id: nodes 'load' -> 'again' -> 'load' loop with no way out"
    ), problem
    assert problem.endswith("(line 4, column 6)"), problem
    assert not (workdir.path / "magistrate.db").exists()


def test_an_expression_comparing_a_number_with_a_string_is_refused(workdir: Workdir) -> None:
    workdir.write("types.yaml", TYPES)
    result = ok(workdir.run("graph", "types.yaml"), 2)
    problem = _one_problem(result.err)
    assert "edges[0].expression: invalid expression" in problem
    assert "(column 1): compares a number with a string" in problem
    assert problem.endswith("(line 10, column 5)"), problem


def test_a_function_that_cannot_be_imported_names_its_node_and_file(workdir: Workdir) -> None:
    # Found when the run starts (imports are checked then, not by the format): the error
    # names the node, not only its index, and the file, and records nothing.
    workdir.write(
        "imports.yaml",
        "id: imports\nentry_node: load\nnodes:\n"
        '  - {id: load, function: "triage_funcs:load", output_keys: [ticket]}\n'
        '  - {id: fetch, function: "triage_funcs:no_such_function"}\n'
        "edges:\n  - {source: load, target: fetch}\n",
    )
    done = workdir.run("run", "imports.yaml", "--input", "text=hi", "-q")
    assert done.code == 2, done.err
    assert "nodes[1].function: " in done.err and "(node 'fetch')" in done.err, done.err
    assert done.err.rstrip().endswith("in imports.yaml"), done.err
    assert not (workdir.path / "magistrate.db").exists()
