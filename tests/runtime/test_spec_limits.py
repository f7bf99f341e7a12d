"""Spec validation against typos and hostile files: names edges read, numeric ranges,
file size, nesting, huge integers, duplicate keys, node kinds without a runner."""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    NodeSpec,
    RetryPolicy,
    Runtime,
    SpecError,
    SpecErrors,
    graph_from_dict,
    load_graph,
    parse_graph,
    validate_graph,
)
from runtime._node_factory import RUNNABLE_KINDS
from runtime.spec import ExpressionVerifier
from runtime.spec._model import NodeKind
from runtime.spec._parse import MAX_SPEC_BYTES
from runtime.spec._validate import RANGES
from runtime.testing import ScriptedProvider

pytestmark = pytest.mark.anyio

REFUND = """
id: refund
entry_node: assess
nodes:
  - id: assess
    function: assess
    output_keys: [amount]
  - id: approve
    function: approve
    output_keys: [approved]
  - id: pay
    function: pay
    output_keys: [paid]
edges:
  - {source: assess, target: approve, condition: conditional, expression: "amont > 100"}
  - {source: assess, target: pay}
  - {source: approve, target: pay}
"""


def test_an_edge_reading_a_name_nothing_writes_is_refused_naming_the_edge() -> None:
    with pytest.raises(SpecErrors) as caught:
        parse_graph(REFUND, "yaml")
    (error,) = caught.value.errors
    assert error.path == "edges[0].expression"
    assert "'amont'" in error.reason


@pytest.mark.parametrize(
    "declaration",
    [
        "memory: [{name: amont}]",  # a declared memory key (seeded by input)
        "nodes:\n  - {id: x, function: f, input_keys: [amont]}",  # some node reads it
    ],
)
def test_a_declared_name_passes(declaration: str) -> None:
    text = REFUND
    if declaration.startswith("memory"):
        text += declaration + "\n"
    else:
        text = text.replace(
            "  - id: pay\n", "  - {id: x, function: f, input_keys: [amont]}\n  - id: pay\n"
        )
        text += "  - {source: pay, target: x}\n"
    parse_graph(text, "yaml")


def test_a_node_that_may_write_any_key_leaves_names_to_the_run() -> None:
    # "assess" then declares no output_keys: it may write 'amont', so the run checks it.
    parse_graph(REFUND.replace("    output_keys: [amount]\n", ""), "yaml")


# --- numbers have finite ranges ---------------------------------------------------------

MINIMAL = {"id": "g", "entry_node": "a", "nodes": [{"id": "a", "function": "f"}]}


@pytest.mark.parametrize(
    ("text", "format", "path"),
    [
        (
            '{"id":"g","entry_node":"a","retry":{"initial_delay":1e999},'
            '"nodes":[{"id":"a","function":"f"}]}',
            "json",
            "retry.initial_delay",
        ),
        (
            "id: g\nentry_node: a\nretry: {max_delay: .inf}\nnodes: [{id: a, function: f}]\n",
            "yaml",
            "retry.max_delay",
        ),
        (
            'id = "g"\nentry_node = "a"\n[retry]\njitter = nan\n[[nodes]]\nid = "a"\n'
            'function = "f"\n',
            "toml",
            "retry.jitter",
        ),
        (
            "id: g\nentry_node: a\nmax_steps: 1000000000000\nnodes: [{id: a, function: f}]\n",
            "yaml",
            "max_steps",
        ),
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f, max_iterations: 100000}]\n",
            "yaml",
            "nodes[0].max_iterations",
        ),
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f, retry: {max_attempts: 1000}}]\n",
            "yaml",
            "nodes[0].retry.max_attempts",
        ),
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f}, {id: b, function: f}]\n"
            "edges: [{source: a, target: b, priority: 99999999999}]\n",
            "yaml",
            "edges[0].priority",
        ),
    ],
)
def test_an_endless_number_in_a_file_is_refused_naming_the_field(
    text: str, format: Any, path: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_graph(text, format)
    paths = [e.path for e in getattr(caught.value, "errors", [caught.value])]
    assert path in paths


def test_python_built_specs_get_the_same_ranges() -> None:
    graph = GraphSpec(
        id="g",
        nodes=[NodeSpec(id="a", function="f", retry=RetryPolicy(initial_delay=math.inf))],
        entry_node="a",
        max_steps=10**30,
    )
    with pytest.raises(SpecErrors) as caught:
        validate_graph(graph)
    assert [e.path for e in caught.value.errors] == ["nodes[0].retry.initial_delay", "max_steps"]


def test_every_number_field_of_the_spec_has_a_range() -> None:
    for struct in (GraphSpec, NodeSpec, EdgeSpec, RetryPolicy):
        numbers = {
            f.name
            for f in msgspec.structs.fields(struct)
            if f.type in (int, float) or f.type in (int | None, float | None)
        }
        assert numbers <= set(RANGES[struct.__name__]), struct.__name__


# --- hostile files ----------------------------------------------------------------------

DEEP = "[" * 1000 + "]" * 1000
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("text", "format"),
    [
        ('{"id": "g", "entry_node": "a", "x": ' + DEEP + "}", "json"),
        ("id: g\nentry_node: a\nx: " + DEEP + "\n", "yaml"),
        ("id: g\nentry_node: a\nx:\n" + "".join("  " * i + "  k:\n" for i in range(1000)), "yaml"),
        ('id = "g"\nentry_node = "a"\nx = ' + DEEP + "\n", "toml"),
    ],
)
def test_nesting_a_thousand_deep_is_a_spec_error_with_its_line(text: str, format: Any) -> None:
    with pytest.raises(SpecError, match=r"nested deeper than 64 levels \(line \d+, column \d+\)"):
        parse_graph(text, format)


def test_nesting_in_builtins_is_a_spec_error_naming_the_path() -> None:
    value: Any = []
    for _ in range(1000):
        value = [value]
    data = {**MINIMAL, "nodes": [{"id": "a", "function": "f", "description": value}]}
    with pytest.raises(SpecError) as caught:
        graph_from_dict(data)
    assert caught.value.path.startswith("nodes[0].description[0][0]")
    assert "nested deeper" in caught.value.reason


@pytest.mark.parametrize(
    ("text", "format", "line"),
    [
        ('{"id": "g",\n "max_steps": ' + HUGE + "}", "json", 2),
        ("id: g\nentry_node: a\nmax_steps: " + HUGE + "\n", "yaml", 3),
        ('id = "g"\nmax_steps = ' + HUGE + "\n", "toml", 2),
    ],
)
def test_a_five_thousand_digit_integer_is_a_spec_error_with_its_line(
    text: str, format: Any, line: int
) -> None:
    with pytest.raises(SpecError, match=rf"digits .*\(line {line}, column \d+\)"):
        parse_graph(text, format)


@pytest.mark.parametrize(
    ("text", "format", "key"),
    [
        ('{"id": "g", "entry_node": "a", "nodes": [], "entry_node": "b"}', "json", "entry_node"),
        (
            "id: g\nentry_node: a\nnodes:\n  - {id: a, function: f, function: g}\n",
            "yaml",
            "function",
        ),
        ("id: g\nid: h\nentry_node: a\nnodes: [{id: a, function: f}]\n", "yaml", "id"),
        ('id = "g"\nentry_node = "a"\nid = "h"\n', "toml", "id"),
    ],
)
def test_duplicate_keys_are_refused_naming_the_key(text: str, format: Any, key: str) -> None:
    with pytest.raises(SpecError, match=f"duplicate key '{key}'"):
        parse_graph(text, format)


def test_yaml_merge_keys_still_override() -> None:
    text = (
        "defaults: &d {function: f, max_iterations: 3}\n"
        "id: g\nentry_node: a\nnodes:\n  - {<<: *d, id: a, max_iterations: 4}\n"
    )
    with pytest.raises(SpecError, match="unknown field `defaults`"):
        parse_graph(text, "yaml")  # gets past the duplicate check, to the schema


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    # Not even valid YAML: the size is checked first, so the error is about size.
    path = tmp_path / "big.yaml"
    path.write_bytes(b"[" * (MAX_SPEC_BYTES + 1))
    with pytest.raises(SpecError, match=f"more than a spec may hold \\({MAX_SPEC_BYTES}\\)"):
        load_graph(path)
    with pytest.raises(SpecError, match="more than a spec may hold"):
        parse_graph("#" * (MAX_SPEC_BYTES + 1), "yaml")


# --- node kinds without a runner --------------------------------------------------------


async def test_a_node_kind_the_runtime_cannot_run_is_refused_at_start() -> None:
    for kind in typing.get_args(NodeKind):
        node = NodeSpec(id="a", kind=kind, function="f")
        if kind == "verifier":
            node = NodeSpec(
                id="a",
                kind=kind,
                output_keys=["a_verification", "a_verification_passed"],
                verifier=ExpressionVerifier(expression="True"),
            )
        graph = GraphSpec(id="g", nodes=[node], entry_node="a")
        runtime = Runtime(None, functions={"f": dict}, provider=ScriptedProvider([]))
        async with runtime as rt:
            if kind in RUNNABLE_KINDS:
                continue
            with pytest.raises(SpecErrors, match=r"nodes\[0\]\.kind: this runtime cannot run"):
                await rt.start(graph)


@pytest.mark.parametrize(
    ("written", "read"), [("1e2", 100.0), ("2.5E-1", 0.25), ("+1.5e3", 1500.0), (".5e1", 5.0)]
)
def test_yaml_numbers_in_exponent_form_are_numbers(written: str, read: float) -> None:
    # YAML 1.1 (PyYAML's) reads these as strings: the field then failed as "expected number".
    text = f"id: g\nentry_node: a\nnodes: [{{id: a, function: f, timeout: {written}}}]\n"
    assert parse_graph(text, "yaml").nodes[0].timeout == read


def test_yaml_exponent_forms_stay_strings_when_quoted_and_refused_when_infinite() -> None:
    quoted = 'id: g\nentry_node: a\nnodes: [{id: a, function: f, description: "1e3"}]\n'
    assert parse_graph(quoted, "yaml").nodes[0].description == "1e3"
    with pytest.raises(SpecError, match="not a finite number"):
        parse_graph("id: g\nentry_node: a\nnodes: [{id: a, function: f, timeout: 1e999}]\n", "yaml")
