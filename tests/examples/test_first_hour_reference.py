"""docs/GRAPH_FORMAT.md's field tables are the structs' fields: each table lists exactly the
fields of the struct it describes, and a default it spells as a literal is the struct's.

A user writes a graph file from these tables; a field listed under the wrong table (a node's
``timeout`` shown as a graph's) is refused as an unknown field when they try it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from runtime import GraphSpec, NodeSpec, SpecError, parse_graph
from runtime.spec import (
    BranchJudgeSpec,
    BranchSpec,
    Constraint,
    EdgeSpec,
    ExpressionVerifier,
    Goal,
    JsonPathVerifier,
    LlmJudgeVerifier,
    MemoryKey,
    ParallelSpec,
    RetryPolicy,
    SuccessCriterion,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "GRAPH_FORMAT.md"

#: (the line the table follows: a heading or a label, the struct it describes, the fields
#: the table leaves to another one).
TABLES: list[tuple[str, type[msgspec.Struct], set[str]]] = [
    ("### Graph", GraphSpec, set()),
    ("### Goal", Goal, set()),
    ("SuccessCriterion:", SuccessCriterion, set()),
    ("Constraint:", Constraint, set()),
    ("### Node", NodeSpec, set()),
    ("### RetryPolicy", RetryPolicy, set()),
    ("### MemoryKey", MemoryKey, set()),
    ("`type: expression`", ExpressionVerifier, {"result_key", "throw_on_fail"}),
    ("`type: jsonpath`", JsonPathVerifier, {"result_key", "throw_on_fail"}),
    ("`type: llm_judge`", LlmJudgeVerifier, {"result_key", "throw_on_fail"}),
    ("### Parallel branches", ParallelSpec, set()),
    ("Branch:", BranchSpec, set()),
    ("BranchJudge:", BranchJudgeSpec, set()),
    ("### Edge", EdgeSpec, set()),
]


def _table(after: str) -> dict[str, str]:
    """field -> default column of the first table after the line ``after``."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows[cells[0].strip("`")] = cells[2]
        elif rows:
            break
    assert rows, f"no table after {after!r}"
    return rows


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize("after, struct, elsewhere", TABLES, ids=[t[0] for t in TABLES])
def test_each_field_table_lists_its_struct_s_fields_and_defaults(
    after: str, struct: type[msgspec.Struct], elsewhere: set[str]
) -> None:
    rows = _table(after)
    fields = {f.name: f for f in msgspec.structs.fields(struct) if f.name not in elsewhere}
    assert set(rows) == set(fields), f"{after}: documented {sorted(rows)}, fields {sorted(fields)}"
    for name, shown in rows.items():
        literal = re.fullmatch(r"`([^`<]*)`", shown)
        if literal is None:  # required, none, "defaults below", a placeholder
            if shown == "none":
                assert _default(fields[name]) is None, f"{after} {name}"
            continue
        assert yaml.safe_load(literal.group(1)) == _default(fields[name]), f"{after} {name}"


def test_a_node_takes_timeouts_and_a_graph_does_not() -> None:
    node = "id: g\nentry_node: a\nnodes: [{id: a, function: f, timeout: 5, tool_timeout: 2}]\n"
    assert parse_graph(node, "yaml").nodes[0].timeout == 5
    with pytest.raises(SpecError, match="unknown field `timeout`"):
        parse_graph("id: g\nentry_node: a\ntimeout: 5\nnodes: [{id: a, function: f}]\n", "yaml")
