"""A graph file names only what the Runtime registers, or imports under allow_imports."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime import Runtime, SpecErrors, parse_graph

pytestmark = pytest.mark.anyio

HOSTILE = """
id: g
entry_node: a
nodes:
  - id: a
    function: "subprocess:getoutput"
"""


def nodes_function(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"seen": sorted(inputs)}


def _graph(reference: str) -> str:
    return f'id: g\nentry_node: a\nnodes:\n  - id: a\n    function: "{reference}"\n'


async def test_a_graph_file_cannot_import_an_unlisted_module(tmp_path: Path) -> None:
    graph = parse_graph(HOSTILE, "yaml")  # a file is data: loading it imports nothing
    async with Runtime(tmp_path / "runs.db") as rt:
        with pytest.raises(SpecErrors) as caught:
            await rt.start(graph)
        assert rt.store is not None and await rt.store.list_runs() == []
    assert caught.value.errors[0].path == "nodes[0].function"
    assert "'subprocess' is not allowed" in str(caught.value)
    assert subprocess.getoutput is not None  # (what the file named: never called)


async def test_registered_names_need_no_import_permission() -> None:
    async with Runtime(None, functions={"subprocess:getoutput": nodes_function}) as rt:
        result = await (await rt.start(parse_graph(HOSTILE, "yaml"))).result()
    assert result.status == "completed" and result.memory == {"seen": []}


async def test_allow_imports_admits_only_objects_defined_under_the_prefixes() -> None:
    allowed = f"{__name__}:nodes_function"
    async with Runtime(None, allow_imports=["tests.runtime"]) as rt:
        result = await (await rt.start(parse_graph(_graph(allowed), "yaml"))).result()
        assert result.status == "completed"
        refused = {
            # imported into an allowed module, defined elsewhere
            f"{__name__}:subprocess.getoutput": "walks into module 'subprocess'",
            f"{__name__}:Runtime": "defined in module 'runtime._runtime'",
            f"{__name__}:_graph": "private names are refused",
            # a module name that only starts like an allowed prefix
            "tests.runtime_evil:f": "'tests.runtime_evil' is not allowed",
            "os:system": "'os' is not allowed",
        }
        for reference, reason in refused.items():
            with pytest.raises(SpecErrors) as caught:
                await rt.start(parse_graph(_graph(reference), "yaml"))
            assert caught.value.errors[0].path == "nodes[0].function"
            assert reason in str(caught.value), reference


async def test_an_object_defined_in_another_module_names_the_module_to_allow_too() -> None:
    # os.getcwd is defined in posix: allowing "os" alone is not enough, and the refusal
    # says what else to allow, so one more try is the last.
    async with Runtime(None, allow_imports=["os"]) as rt:
        with pytest.raises(SpecErrors) as caught:
            await rt.start(parse_graph(_graph("os:getcwd"), "yaml"))
    message = str(caught.value)
    assert "defined in module 'posix'" in message
    assert "allow 'posix' too: --allow-imports posix" in message


def test_allow_imports_takes_a_list_not_one_string() -> None:
    with pytest.raises(TypeError, match="sequence of module prefixes"):
        Runtime(None, allow_imports="tests")


class JudgeNeedingArguments:
    """A judge class that cannot be made without arguments."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def evaluate(self, context: Any) -> None:
        return None


async def test_an_allowed_judge_class_needing_arguments_is_a_spec_error_naming_the_field() -> None:
    from runtime import ScriptedProvider

    graph = parse_graph(
        "id: g\nentry_node: a\nnodes:\n  - id: a\n    kind: llm\n    output_keys: [x]\n"
        f'    judge: "{__name__}:JudgeNeedingArguments"\n',
        "yaml",
    )
    async with Runtime(None, provider=ScriptedProvider([]), allow_imports=[__name__]) as rt:
        with pytest.raises(SpecErrors) as caught:
            await rt.start(graph)
    assert caught.value.errors[0].path == "nodes[0].judge"
    assert "needs constructor arguments" in str(caught.value)
    assert "Runtime(judges=" in str(caught.value)


@pytest.mark.parametrize(
    ("source", "raised"),
    [
        ("raise RuntimeError('no config here')\n", "RuntimeError: no config here"),
        ("def f(:\n", "SyntaxError"),
    ],
)
async def test_a_module_that_raises_as_it_is_imported_is_a_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, raised: str
) -> None:
    # Like a missing module: a graph this runtime cannot run (a worker leaves it, with
    # backoff), not an error that escapes from the start or the claim.
    name = f"failing_on_import_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    async with Runtime(tmp_path / "runs.db", allow_imports=[name]) as rt:
        with pytest.raises(SpecErrors) as caught:
            await rt.start(parse_graph(_graph(f"{name}:f"), "yaml"))
        assert rt.store is not None and await rt.store.list_runs() == []
    assert caught.value.errors[0].path == "nodes[0].function"
    assert f"importing module {name!r} raised {raised}" in str(caught.value)
