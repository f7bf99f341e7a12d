"""Graph specs: loading from every format, round trips, hashing, validation, errors."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._errors import SpecError, SpecErrors
from runtime.spec._expr import (
    FUNCTIONS,
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_NODES,
    MAX_SIZE,
    MAX_SOURCE_LENGTH,
)
from runtime.spec._load import graph_from_dict, load_graph, parse_graph
from runtime.spec._model import (
    EdgeSpec,
    GraphSpec,
    MemoryKey,
    NodeSpec,
    RetryPolicy,
    compact_graph_dict,
    function_ref,
    graph_hash,
    graph_to_dict,
)
from runtime.spec._validate import validate_graph
from runtime.spec._verifier import ExpressionVerifier

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"
DOCS = Path(__file__).parents[2] / "docs" / "GRAPH_FORMAT.md"
EXAMPLE = "support_triage"


def module_level_function(x: int) -> int:
    return x


class Holder:
    @staticmethod
    def static(x: int) -> int:
        return x

    def method(self) -> int:
        return 1


def to_toml(data: dict[str, Any]) -> str:
    """A minimal TOML writer for spec dicts (the stdlib only reads TOML)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(i) for i in v) + "]"
        if isinstance(v, dict):
            items = ", ".join(
                f"{json.dumps(k)} = {value(i)}" for k, i in v.items() if i is not None
            )
            return "{ " + items + " }"
        raise TypeError(v)

    lines: list[str] = []
    tables: list[str] = []
    for key, item in data.items():
        if item is None:
            continue
        if isinstance(item, list) and item and all(isinstance(i, dict) for i in item):
            for entry in item:
                tables.append(f"[[{key}]]")
                tables.extend(f"{k} = {value(v)}" for k, v in entry.items() if v is not None)
        else:
            lines.append(f"{key} = {value(item)}")
    return "\n".join(lines + tables) + "\n"


def minimal(**changes: Any) -> dict[str, Any]:
    """A small valid graph as a dict: a -> b -> c."""
    graph: dict[str, Any] = {
        "id": "g",
        "entry_node": "a",
        "terminal_nodes": ["c"],
        "nodes": [
            {"id": "a", "function": "m:a", "output_keys": ["x"]},
            {"id": "b", "kind": "llm", "output_keys": ["y"]},
            {"id": "c", "function": "m:c"},
        ],
        "edges": [
            {"source": "a", "target": "b"},
            {"source": "b", "target": "c"},
        ],
    }
    graph.update(changes)
    return graph


def example() -> GraphSpec:
    return load_graph(DATA / f"{EXAMPLE}.yaml")


# --- loading and round trips -------------------------------------------------------


def test_the_example_loads_identically_from_yaml_toml_and_json() -> None:
    graphs = [load_graph(DATA / f"{EXAMPLE}.{ext}") for ext in ("yaml", "toml", "json")]
    assert graphs[0] == graphs[1] == graphs[2]
    assert len({graph_hash(g) for g in graphs}) == 1
    graph = graphs[0]
    assert graph.node("check_draft").verifier == ExpressionVerifier(
        expression="len(draft) > 40 and not contains(lower(draft), 'guarantee')",
        result_key="draft_check",
    )
    assert graph.node("lookup_account").retry == RetryPolicy(max_attempts=5, initial_delay=0.5)
    assert graph.memory == [
        MemoryKey(name="notes", reducer="append"),
        MemoryKey(name="customer", reducer="merge"),
    ]


def _doc_blocks(language: str) -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_docs_example_is_the_tested_example() -> None:
    graph = example()
    yaml_blocks = [b for b in _doc_blocks("yaml") if "id: support-triage" in b]
    toml_blocks = [b for b in _doc_blocks("toml") if 'id = "support-triage"' in b]
    assert yaml_blocks and toml_blocks
    assert parse_graph(yaml_blocks[0], "yaml") == graph
    assert parse_graph(toml_blocks[0], "toml") == graph
    # And the data files are the docs' text, so neither can drift alone.
    assert yaml_blocks[0].strip() in (DATA / f"{EXAMPLE}.yaml").read_text(encoding="utf-8")
    assert toml_blocks[0].strip() in (DATA / f"{EXAMPLE}.toml").read_text(encoding="utf-8")


def test_the_docs_list_every_allowed_function_and_every_bound() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name in FUNCTIONS:
        assert f"`{name}(" in text, name
    for bound in (MAX_SOURCE_LENGTH, MAX_NODES, MAX_DEPTH, MAX_INT_BITS, MAX_SIZE):
        assert f"{bound:,}" in text or str(bound) in text, bound


@pytest.mark.parametrize("fmt", ["yaml", "toml", "json"])
def test_dict_round_trip_through_each_format_is_exact(fmt: str, tmp_path: Path) -> None:
    graph = example()
    data = graph_to_dict(graph)
    assert graph_from_dict(data) == graph
    if fmt == "json":
        text = json.dumps(data, indent=1)
    elif fmt == "yaml":
        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = to_toml(data)
    path = tmp_path / f"graph.{fmt}"
    path.write_text(text, encoding="utf-8")
    loaded = load_graph(path)
    assert loaded == graph
    assert graph_to_dict(loaded) == data
    assert graph_hash(loaded) == graph_hash(graph)


def test_graph_to_dict_holds_every_field_including_defaults() -> None:
    data = graph_to_dict(
        GraphSpec(id="g", nodes=[NodeSpec(id="a", function="m:f")], entry_node="a")
    )
    assert data["max_steps"] == 100
    assert data["retry"] == {
        "max_attempts": 3, "initial_delay": 0.1, "max_delay": 5.0, "multiplier": 2.0, "jitter": 0.1
    }  # fmt: skip
    assert data["nodes"][0]["judge"] is None
    assert data["goal"] is None


def test_the_compact_dict_leaves_out_defaults_and_reads_back_as_the_same_graph() -> None:
    graph = example()
    data = compact_graph_dict(graph)
    assert graph_from_dict(json.loads(json.dumps(data))) == graph
    assert graph_hash(graph_from_dict(data)) == graph_hash(graph)
    check = next(n for n in data["nodes"] if n["id"] == "check_draft")
    assert check["verifier"] == {
        "type": "expression",
        "expression": "len(draft) > 40 and not contains(lower(draft), 'guarantee')",
        "result_key": "draft_check",
    }
    lookup = next(n for n in data["nodes"] if n["id"] == "lookup_account")
    assert lookup["retry"] == {"max_attempts": 5, "initial_delay": 0.5}
    # Every field left out holds its default; every field kept differs from it.
    full = graph_to_dict(graph)
    defaults = graph_to_dict(GraphSpec(id="x", nodes=[], entry_node="x"))
    for key, value in full.items():
        if key in data:
            assert key in ("id", "nodes", "entry_node") or value != defaults[key], key
        else:
            assert value == defaults[key], key
    assert len(json.dumps(data)) < len(json.dumps(full))


def test_the_compact_dict_of_a_bare_graph_holds_only_its_required_fields() -> None:
    graph = GraphSpec(id="g", nodes=[NodeSpec(id="a")], entry_node="a")
    assert compact_graph_dict(graph) == {"id": "g", "nodes": [{"id": "a"}], "entry_node": "a"}


def test_graph_hash_is_canonical_and_sensitive() -> None:
    data = minimal()
    reordered = dict(reversed(list(data.items())))
    assert graph_hash(graph_from_dict(data)) == graph_hash(graph_from_dict(reordered))
    changed = graph_from_dict(minimal(max_steps=7))
    assert graph_hash(changed) != graph_hash(graph_from_dict(data))
    assert re.fullmatch(r"[0-9a-f]{64}", graph_hash(changed))


def test_node_and_outgoing_lookups() -> None:
    graph = example()
    assert graph.node("reply").client_facing is True
    assert graph.has_node("reply") and not graph.has_node("nope")
    out = graph.outgoing("check_draft")
    assert [i for i, _ in out] == [7, 8, 9]
    assert [e.target for _, e in out] == ["approve_refund", "reply", "draft_answer"]
    assert all(graph.edges[i] is e for i, e in out)
    assert graph.outgoing("reply") == []
    with pytest.raises(SpecError, match="no node with id 'nope'"):
        graph.node("nope")


def test_lookups_follow_each_instance() -> None:
    first = graph_from_dict(minimal())
    second = graph_from_dict(
        minimal(
            nodes=[*minimal()["nodes"], {"id": "d", "function": "m:d"}],
            edges=[*minimal()["edges"], {"source": "c", "target": "d"}],
        )
    )
    assert first.node("a") == second.node("a")
    assert not first.has_node("d")
    assert second.has_node("d")
    assert [e.target for _, e in second.outgoing("c")] == ["d"]


def test_python_construction_validates_the_same_way() -> None:
    graph = GraphSpec(
        id="g",
        nodes=[NodeSpec(id="a", function=function_ref(module_level_function))],
        entry_node="a",
    )
    validate_graph(graph)
    assert graph.nodes[0].function == f"{__name__}:module_level_function"


# --- validation --------------------------------------------------------------------


def _nodes(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [*copy.deepcopy(minimal()["nodes"]), *extra]


def _edges(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [*copy.deepcopy(minimal()["edges"]), *extra]


def _node_change(index: int, **changes: Any) -> list[dict[str, Any]]:
    nodes = _nodes()
    nodes[index].update(changes)
    return nodes


BROKEN: list[tuple[str, dict[str, Any], str]] = [
    ("duplicate node id", minimal(nodes=_nodes({"id": "b", "function": "m:x"})), "nodes[3].id"),
    ("unknown entry node", minimal(entry_node="zz"), "entry_node"),
    ("empty entry node", minimal(entry_node=""), "entry_node"),
    (
        "edge to unknown node",
        minimal(edges=_edges({"source": "c", "target": "zz"})),
        "edges[2].target",
    ),
    (
        "edge from unknown node",
        minimal(edges=_edges({"source": "zz", "target": "c"})),
        "edges[2].source",
    ),
    ("unknown terminal node", minimal(terminal_nodes=["zz"]), "terminal_nodes[0]"),
    ("unknown pause node", minimal(pause_nodes=["b", "zz"]), "pause_nodes[1]"),
    ("unreachable node", minimal(nodes=_nodes({"id": "d", "function": "m:d"})), "nodes[3].id"),
    (
        "conditional without expression",
        minimal(edges=_edges({"source": "a", "target": "c", "condition": "conditional"})),
        "edges[2].expression",
    ),
    (
        "conditional with bad syntax",
        minimal(
            edges=_edges(
                {"source": "a", "target": "c", "condition": "conditional", "expression": "x >"}
            )
        ),
        "edges[2].expression",
    ),
    (
        "conditional with forbidden syntax",
        minimal(
            edges=_edges(
                {
                    "source": "a",
                    "target": "c",
                    "condition": "conditional",
                    "expression": "x.__class__",
                }
            )
        ),
        "edges[2].expression",
    ),
    (
        "expression on a non-conditional edge",
        minimal(edges=_edges({"source": "a", "target": "c", "expression": "x > 1"})),
        "edges[2].expression",
    ),
    (
        "llm_decide without fallback",
        minimal(edges=_edges({"source": "a", "target": "c", "condition": "llm_decide"})),
        "edges[2].fallback",
    ),
    (
        "llm_decide with unknown fallback",
        minimal(
            edges=_edges(
                {"source": "a", "target": "c", "condition": "llm_decide", "fallback": "zz"}
            )
        ),
        "edges[2].fallback",
    ),
    (
        "fallback on a non-llm_decide edge",
        minimal(edges=_edges({"source": "a", "target": "c", "fallback": "c"})),
        "edges[2].fallback",
    ),
    ("max_steps below 1", minimal(max_steps=0), "max_steps"),
    (
        "max_iterations below 1",
        minimal(nodes=_node_change(1, max_iterations=0)),
        "nodes[1].max_iterations",
    ),
    (
        "judge_every_n_turns below 1",
        minimal(nodes=_node_change(1, judge_every_n_turns=0)),
        "nodes[1].judge_every_n_turns",
    ),
    (
        "function node without function",
        minimal(nodes=_node_change(0, function=None)),
        "nodes[0].function",
    ),
    (
        "nullable key not an output key",
        minimal(nodes=_node_change(1, nullable_keys=["y", "q"])),
        "nodes[1].nullable_keys[1]",
    ),
    (
        "memory key declared twice",
        minimal(memory=[{"name": "k"}, {"name": "j"}, {"name": "k", "reducer": "append"}]),
        "memory[2].name",
    ),
    (
        "verifier expression invalid",
        minimal(
            nodes=_node_change(
                1, kind="verifier", verifier={"type": "expression", "expression": "lambda: 1"}
            )
        ),
        "nodes[1].verifier.expression",
    ),
    (
        "verifier node without verifier",
        minimal(nodes=_node_change(1, kind="verifier")),
        "nodes[1].verifier",
    ),
    (
        "expression verifier without expression",
        minimal(nodes=_node_change(1, kind="verifier", verifier={"type": "expression"})),
        "nodes[1].verifier.expression",
    ),
    (
        "jsonpath verifier without path",
        minimal(
            nodes=_node_change(
                1,
                kind="verifier",
                verifier={
                    "type": "jsonpath",
                    "target_key": "d",
                    "assertion": {"op": "gt", "value": 0},
                },
            )
        ),
        "nodes[1].verifier.path",
    ),
    (
        "pass threshold above 1",
        minimal(
            nodes=_node_change(
                1,
                kind="verifier",
                verifier={"type": "llm_judge", "target_key": "d", "pass_threshold": 1.5},
            )
        ),
        "nodes[1].verifier.pass_threshold",
    ),
    ("negative retry delay", minimal(retry={"initial_delay": -1.0}), "retry.initial_delay"),
    (
        "node retry without attempts",
        minimal(nodes=_node_change(0, retry={"max_attempts": 0})),
        "nodes[0].retry.max_attempts",
    ),
    ("no nodes", minimal(nodes=[], edges=[], terminal_nodes=[]), "nodes"),
]


@pytest.mark.parametrize(
    ("data", "path"), [(d, p) for _, d, p in BROKEN], ids=[name for name, _, _ in BROKEN]
)
def test_each_validation_error_names_its_path(data: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecErrors) as info:
        graph_from_dict(data)
    assert path in [e.path for e in info.value.errors], info.value.errors


def test_the_valid_minimal_graph_and_the_example_pass_validation() -> None:
    validate_graph(graph_from_dict(minimal()))
    validate_graph(example())


def test_spec_errors_collect_every_problem() -> None:
    data = minimal(
        entry_node="a",
        max_steps=0,
        pause_nodes=["zz"],
        edges=_edges(
            {"source": "a", "target": "nowhere"},
            {"source": "b", "target": "c", "condition": "conditional", "expression": "1 +"},
        ),
    )
    with pytest.raises(SpecErrors) as info:
        graph_from_dict(data)
    paths = [e.path for e in info.value.errors]
    assert paths == ["edges[2].target", "edges[3].expression", "pause_nodes[0]", "max_steps"]
    assert isinstance(info.value, SpecError)
    assert info.value.path == "edges[2].target"
    assert "4 problems in graph spec" in str(info.value)
    assert "column" in info.value.errors[1].reason


def test_validation_can_be_skipped_and_run_later() -> None:
    graph = graph_from_dict(minimal(max_steps=0), validate=False)
    assert graph.max_steps == 0
    with pytest.raises(SpecErrors):
        validate_graph(graph)


def test_a_node_reachable_only_through_a_fallback_is_reachable() -> None:
    data = minimal(
        nodes=_nodes({"id": "d", "function": "m:d"}),
        edges=_edges({"source": "c", "target": "b", "condition": "llm_decide", "fallback": "d"}),
    )
    validate_graph(graph_from_dict(data))


# --- load errors -------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_toml_syntax_is_a_spec_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "g.toml", 'id = "g"\nentry_node = \n')
    with pytest.raises(SpecError) as info:
        load_graph(path)
    assert "invalid TOML" in info.value.reason
    assert "line 2" in info.value.reason
    assert str(path) in info.value.reason


def test_bad_yaml_syntax_is_a_spec_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "g.yaml", "id: g\nnodes: [a, b\nentry_node: a\n")
    with pytest.raises(SpecError, match=r"invalid YAML.*line \d+, column \d+"):
        load_graph(path)


def test_bad_json_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="invalid JSON"):
        load_graph(_write(tmp_path, "g.json", '{"id": "g",'))


def test_yaml_python_tags_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "g.yml", "id: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(SpecError, match="invalid YAML"):
        load_graph(path)


def test_yaml_alias_bomb_is_refused_without_expanding(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("id: *a8")
    with pytest.raises(SpecError, match="at most"):
        load_graph(_write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n"))


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        (minimal(max_steps="10"), "max_steps", "Expected `int`, got `str`"),
        (minimal(nodes=_node_change(1, kind="robot")), "nodes[1].kind", "Invalid enum value"),
        (
            minimal(edges=[{"source": "a", "target": "b", "priority": 1.5}]),
            "edges[0].priority",
            "Expected `int`",
        ),
        (minimal(entry_nod="a"), "entry_nod", "unknown field"),
        (
            {k: v for k, v in minimal().items() if k != "entry_node"},
            "entry_node",
            "missing required field",
        ),
        (
            minimal(nodes=_node_change(2, retry={"max_attempt": 2})),
            "nodes[2].retry.max_attempt",
            "unknown field",
        ),
        (minimal(goal="be good"), "goal", "Expected `object | null`"),
    ],
)
def test_type_errors_are_spec_errors_with_the_field_path(
    data: dict[str, Any], path: str, reason: str, tmp_path: Path
) -> None:
    for writer, ext in ((json.dumps, "json"), (lambda d: yaml.safe_dump(d), "yaml")):
        file = _write(tmp_path, f"g.{ext}", writer(data))
        with pytest.raises(SpecError) as info:
            load_graph(file)
        assert not isinstance(info.value, SpecErrors)
        assert info.value.path == path
        assert reason in info.value.reason
        assert isinstance(info.value.__cause__, Exception)


def test_toml_type_error_names_the_field(tmp_path: Path) -> None:
    text = to_toml(minimal()).replace('id = "a"', "id = 3", 1)
    with pytest.raises(SpecError) as info:
        load_graph(_write(tmp_path, "g.toml", text))
    assert info.value.path == "nodes[0].id"


def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="must be a mapping, got list"):
        load_graph(_write(tmp_path, "g.yaml", "- a\n- b\n"))
    with pytest.raises(SpecError, match="must be a mapping, got NoneType"):
        load_graph(_write(tmp_path, "empty.yaml", ""))


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="unknown spec file suffix"):
        load_graph(_write(tmp_path, "g.ini", "x"))
    with pytest.raises(SpecError, match="cannot read"):
        load_graph(tmp_path / "absent.yaml")
    with pytest.raises(SpecError, match="unknown spec format"):
        parse_graph("{}", "xml")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="not UTF-8"):
        parse_graph(b"\xff\xfe", "json")


# --- function_ref ------------------------------------------------------------------


def test_function_ref_of_module_level_callables() -> None:
    assert function_ref(module_level_function) == f"{__name__}:module_level_function"
    assert function_ref(Holder.static) == f"{__name__}:Holder.static"
    assert function_ref(len) == "builtins:len"
    assert function_ref(math.sqrt) == "math:sqrt"


def _make_closure() -> Callable[[], int]:
    def inner() -> int:
        return 1

    return inner


@pytest.mark.parametrize(
    "fn",
    [lambda: 1, _make_closure(), Holder().method, object()],
    ids=["lambda", "closure", "bound-method", "not-callable"],
)
def test_function_ref_refuses_what_cannot_be_imported_back(fn: Any) -> None:
    with pytest.raises(SpecError) as info:
        function_ref(fn)
    assert info.value.path == "function"


# --- property: any spec survives the dict round trip -------------------------------

ids = st.text(alphabet="abcdef", min_size=1, max_size=3)


@st.composite
def graphs(draw: st.DrawFn) -> GraphSpec:
    node_ids = draw(st.lists(ids, min_size=1, max_size=5, unique=True))
    nodes = [
        NodeSpec(
            id=i,
            kind=draw(st.sampled_from(["function", "router", "llm"])),
            function=draw(st.none() | st.just("m:f")),
            output_keys=draw(st.lists(ids, max_size=3)),
            max_iterations=draw(st.integers(-1, 60)),
            retry=draw(st.none() | st.builds(RetryPolicy, max_attempts=st.integers(0, 5))),
        )
        for i in node_ids
    ]
    edges = [
        EdgeSpec(
            source=draw(st.sampled_from(node_ids)),
            target=draw(st.sampled_from(node_ids)),
            condition=draw(st.sampled_from(["always", "on_success", "on_failure"])),
            priority=draw(st.integers(-3, 3)),
        )
        for _ in range(draw(st.integers(0, 6)))
    ]
    return GraphSpec(
        id="g",
        nodes=nodes,
        edges=edges,
        entry_node=draw(st.sampled_from(node_ids)),
        max_steps=draw(st.integers(0, 200)),
        memory=[MemoryKey(name=n) for n in draw(st.lists(ids, max_size=3))],
    )


@settings(max_examples=100, deadline=None)
@given(graph=graphs())
def test_any_graph_round_trips_and_validation_raises_only_spec_errors(graph: GraphSpec) -> None:
    data = graph_to_dict(graph)
    again = graph_from_dict(json.loads(json.dumps(data)), validate=False)
    assert again == graph
    assert graph_hash(again) == graph_hash(graph)
    compact = graph_from_dict(json.loads(json.dumps(compact_graph_dict(graph))), validate=False)
    assert compact == graph
    try:
        validate_graph(graph)
    except SpecErrors as errors:
        assert errors.errors
        assert all(e.path for e in errors.errors)
