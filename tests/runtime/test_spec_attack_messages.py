"""A mistake in a graph file gets one clear error: the field, the file's line and column,
and what to write instead (a value the field takes, the spelling it is closest to)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runtime import SpecError, SpecErrors, graph_from_dict, load_graph, parse_graph

HEAD = "id: g\nentry_node: a\n"


def _refused(text: str, fmt: str = "yaml") -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_graph(text, fmt, source=f"g.{fmt}")  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(
    ("text", "path", "says"),
    [
        (
            HEAD + "nodes: [{id: a, kind: fucntion, function: f}]",
            "nodes[0].kind",
            "Invalid enum value 'fucntion': one of 'function', 'llm', 'router', 'verifier'; "
            "did you mean 'function'?",
        ),
        (
            HEAD + "nodes: [{id: a, function: f}, {id: b, function: f}]\n"
            "edges: [{source: a, target: b, condition: on_sucess}]",
            "edges[0].condition",
            "did you mean 'on_success'?",
        ),
        (
            HEAD + "memory: [{name: x, reducer: apend}]\nnodes: [{id: a, function: f}]",
            "memory[0].reducer",
            "one of 'append', 'merge', 'replace'; did you mean 'append'?",
        ),
        (
            HEAD + "nodes: [{id: a, kind: verifier, output_keys: [a_verification, "
            "a_verification_passed], verifier: {type: expresion, expression: 'True'}}]",
            "nodes[0].verifier.type",
            "one of 'expression', 'jsonpath', 'llm_judge'; did you mean 'expression'?",
        ),
    ],
)
def test_a_value_outside_a_field_s_choices_lists_them_and_the_closest(
    text: str, path: str, says: str
) -> None:
    error = _refused(text)
    assert error.path == path
    assert says in error.reason, error.reason


@pytest.mark.parametrize(
    ("text", "path", "says"),
    [
        (HEAD + "max_steps: '10'\nnodes: [{id: a, function: f}]", "max_steps", "without quotes"),
        (
            HEAD + "nodes: [{id: a, function: f, retry: {max_attempts: '3'}}]",
            "nodes[0].retry.max_attempts",
            "without quotes",
        ),
        ("id: yes\nentry_node: a\nnodes: [{id: a, function: f}]", "id", "quote it"),
        ("id: g\nversion: 1.0\nentry_node: a\nnodes: [{id: a, function: f}]", "version", "quote"),
        (
            "id: g\nversion: 2024-01-01\nentry_node: a\nnodes: [{id: a, function: f}]",
            "version",
            "quote",
        ),
        (
            HEAD + "nodes: [{id: a, function: f, input_keys: ticket}]",
            "nodes[0].input_keys",
            "[ticket]",
        ),
        (HEAD + "max_steps: 10.5\nnodes: [{id: a, function: f}]", "max_steps", "whole number"),
    ],
)
def test_a_value_of_the_wrong_type_says_how_to_write_it(text: str, path: str, says: str) -> None:
    error = _refused(text)
    assert error.path == path
    assert says in error.reason, error.reason


def test_a_field_name_that_is_not_a_string_names_its_mapping() -> None:
    error = _refused(HEAD + "nodes: [{id: a, function: f, 1: x}]")
    assert error.path == "nodes[0]"
    assert "field names are strings" in error.reason and "- at `" not in str(error)


# --- the line and column of the problem ---------------------------------------------

YAML_TYPO = """\
id: g
entry_node: a
nodes:
  - id: a
    function: f
    output_keys: [x]
  - id: bravo
    function: f
    retry:
      max_attemps: 3
edges:
  - source: a
    target: bravo
"""


def test_a_yaml_type_problem_names_its_line_and_column() -> None:
    error = _refused(YAML_TYPO)
    assert error.path == "nodes[1].retry.max_attemps"
    assert error.reason.endswith("did you mean `max_attempts`? (line 10, column 7)"), error.reason
    assert getattr(error, "__notes__", []) == ["in g.yaml"]
    with pytest.raises(SpecError) as built:  # builtins have no lines to name
        graph_from_dict(yaml.safe_load(YAML_TYPO))
    assert built.value.reason.endswith("did you mean `max_attempts`?"), built.value.reason


def test_each_validation_problem_of_a_yaml_file_names_its_line() -> None:
    text = (
        YAML_TYPO.replace("      max_attemps: 3\n", "      max_attempts: 3\n").replace(
            "target: bravo", "target: brav"
        )
        + "  - {source: a, target: a, condition: conditional, expression: 'x >'}\n"
    )
    with pytest.raises(SpecErrors) as caught:
        parse_graph(text, "yaml", source="g.yaml")
    found = {e.path: e.reason for e in caught.value.errors}
    assert found["edges[0].target"].endswith("(line 13, column 5)"), found
    assert found["edges[1].expression"].endswith("(line 14, column 52)"), found
    assert "(line 13, column 5)" in str(caught.value)


def test_a_json_problem_names_its_line_and_column() -> None:
    text = (
        '{\n  "id": "g",\n  "entry_node": "a",\n  "nodes": [\n'
        '\t{"id": "a", "function": "f", "outptu_keys": []}\n  ]\n}\n'
    )
    error = _refused(text, "json")
    assert error.path == "nodes[0].outptu_keys"
    assert error.reason.endswith("(line 5, column 31)"), error.reason


def test_a_toml_problem_names_its_line() -> None:
    text = (
        'id = "g"\nentry_node = "a"\n\n[[nodes]]\nid = "a"\nfunction = "f"\n\n'
        '[[nodes]]\nid = "b"\nfunction = "f"\nretry = { max_attempts = "3" }\n\n'
        '[nodes.verifier]\ntype = "expression"\n\n[[edges]]\nsource = "a"\ntarget = "b"\n'
    )
    error = _refused(text, "toml")
    assert error.path == "nodes[1].retry.max_attempts"
    assert error.reason.endswith("(line 11, column 11)"), error.reason
    with pytest.raises(SpecErrors) as caught:
        parse_graph(text.replace('"3"', "3"), "toml")
    [verifier] = [e for e in caught.value.errors if e.path == "nodes[1].verifier"]
    assert verifier.reason.endswith("(line 13, column 1)"), verifier.reason


def test_load_graph_names_the_line_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "g.yml"
    path.write_text(HEAD + "nodes:\n  - id: a\n    function: f\n    kind: fucntion\n")
    with pytest.raises(SpecError) as caught:
        load_graph(path)
    assert caught.value.reason.endswith("(line 6, column 5)"), caught.value.reason


# --- syntax ------------------------------------------------------------------------


def test_a_yaml_value_that_needs_quotes_says_so() -> None:
    text = (
        HEAD + "nodes: [{id: a, function: f, output_keys: [x]}, {id: b, function: f}]\n"
        "edges:\n  - source: a\n    target: b\n    condition: conditional\n"
        "    expression: x == 'y' or x == 'z'\n"
    )
    text = text.replace("x == 'y' or x == 'z'", "'y' == x or 'z' == x")
    error = _refused(text)
    assert "(line 8, column" in error.reason
    assert """quote the whole value: expression: "'y' == x or 'z' == x\"""" in error.reason, (
        error.reason
    )
    colon = _refused(HEAD + "nodes:\n  - id: a\n    function: f\n    description: note: this\n")
    assert 'quote the whole value: description: "note: this"' in colon.reason, colon.reason


def test_a_yaml_syntax_error_names_where_the_construct_began() -> None:
    error = _refused("id: g\nentry_node a\nnodes: [{id: a, function: f}]\n")
    assert "line 2, column 1" in error.reason, error.reason


@pytest.mark.parametrize("fmt", ["json", "toml"])
def test_a_byte_order_mark_is_read_as_in_yaml(fmt: str) -> None:
    text = {
        "json": '{"id": "g", "entry_node": "a", "nodes": [{"id": "a", "function": "f"}]}',
        "toml": 'id = "g"\nentry_node = "a"\n[[nodes]]\nid = "a"\nfunction = "f"\n',
    }[fmt]
    graph = parse_graph("\ufeff" + text, fmt)  # type: ignore[arg-type]
    assert graph.entry_node == "a"
    assert parse_graph(("\ufeff" + text).encode(), fmt).id == "g"  # type: ignore[arg-type]
