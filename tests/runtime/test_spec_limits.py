"""Spec validation against typos and hostile files: names edges read, numeric ranges,
file size, nesting, huge integers, duplicate keys, node kinds without a runner."""

from __future__ import annotations

import pytest

from runtime import SpecErrors, parse_graph

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
