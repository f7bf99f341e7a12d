"""Each package's public surface is exactly what its ``__init__`` lists in ``__all__``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = [
    "actors",
    "eventstore",
    "runtime",
    "runtime.spec",
    "runtime.events",
    "runtime.providers",
    "runtime.llm",
    "runtime.engine",
    "runtime.observe",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    package = importlib.import_module(name)
    exported = set(package.__all__)
    assert len(exported) == len(package.__all__), "duplicates in __all__"
    for public in exported:
        assert not public.startswith("_"), f"{name}.__all__ leaks private name {public}"
        assert hasattr(package, public), f"{name}.__all__ names missing {public}"
    for attr, value in vars(package).items():
        if attr.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if attr == "annotations":  # from __future__ import annotations
            continue
        assert attr in exported, f"{name}.{attr} is public but not in __all__"


@pytest.mark.parametrize(
    ("lower", "higher"),
    [("actors", "eventstore"), ("actors", "runtime"), ("eventstore", "runtime")],
)
def test_dependencies_point_one_way(lower: str, higher: str) -> None:
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / lower
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert f"import {higher}" not in text and f"from {higher}" not in text, (
            f"{path} imports {higher}: dependencies must point runtime -> eventstore -> actors"
        )


def test_optional_libraries_load_only_when_used(tmp_path: Path) -> None:
    # `import runtime` and durable runs of plain nodes need no HTTP client (httpx also
    # imports its own command line's modules), no metrics, no YAML, JSONPath or regex
    # engine; a provider that talks HTTP loads httpx, metrics load prometheus_client, a
    # YAML graph loads yaml, a jsonpath verifier with a regex check the other two.
    def loaded(code: str) -> list[str]:
        names = (
            "('httpx', 'rich', 'click', 'pygments', 'prometheus_client', 'yaml', "
            "'jsonpath_rfc9535', 'regex')"
        )
        check = f"{code}\nimport sys\nprint(sorted(m for m in {names} if m in sys.modules))"
        out = subprocess.run(
            [sys.executable, "-c", check], capture_output=True, text=True, check=True, cwd=ROOT
        )
        return out.stdout.strip().splitlines()[-1:]

    run = (
        "import anyio\n"
        "from runtime import GraphSpec, NodeSpec, Runtime\n"
        "async def main():\n"
        f"    async with Runtime({str(tmp_path / 'runs.db')!r},"
        " functions={'f': lambda inputs: {'x': 1}}) as rt:\n"
        "        graph = GraphSpec(id='g', nodes=[NodeSpec(id='a', function='f')],"
        " entry_node='a')\n"
        "        result = await (await rt.start(graph)).result()\n"
        "        assert result.status == 'completed', result\n"
        "anyio.run(main)"
    )
    assert loaded("import runtime") == ["[]"]
    assert loaded(run) == ["[]"]
    assert "'httpx'" in loaded("from runtime import OpenAIProvider; OpenAIProvider(api_key='k')")[0]
    assert (
        "'httpx'"
        in loaded("from runtime import AnthropicProvider; AnthropicProvider(api_key='k')")[0]
    )
    assert loaded("from runtime import RuntimeMetrics") == ["['prometheus_client']"]
    yaml_graph = "id: g\nentry_node: a\nnodes: [{id: a, function: f}]\n"
    parse = "from runtime import parse_graph; parse_graph({!r}, {!r})"
    assert loaded(parse.format(yaml_graph, "yaml")) == ["['yaml']"]
    check = {"type": "jsonpath", "target_key": "doc", "path": "$.title"}
    check["assertion"] = {"op": "matches", "value": "^T"}
    node = {"id": "v", "kind": "verifier", "verifier": check}
    node["output_keys"] = ["v_verification", "v_verification_passed"]
    verifier_graph = json.dumps({"id": "g", "entry_node": "v", "nodes": [node]})
    assert loaded(parse.format(verifier_graph, "json")) == ["['jsonpath_rfc9535', 'regex']"]
    # The names loaded on first use are still listed (dir, __all__) and importable.
    import runtime

    assert {"RuntimeMetrics", "serve_metrics"} <= set(dir(runtime)) & set(runtime.__all__)
