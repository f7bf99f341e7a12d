"""A graph may name its tools by import path ("module:attr"), as it names functions and
judges: the runtime imports them only under allow_imports, in the library itself (so an
app, the CLI, the server and workers resolve them alike)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import GraphSpec, NodeSpec, Runtime, SpecErrors
from runtime.events import ToolResult
from runtime.testing import ScriptedProvider, reply, tool_call

pytestmark = pytest.mark.anyio


def graph(*tools: str) -> GraphSpec:
    node = NodeSpec(id="agent", kind="llm", tools=list(tools), output_keys=["tier"])
    return GraphSpec(id="tools", nodes=[node], entry_node="agent")


def model() -> ScriptedProvider:
    return ScriptedProvider(
        [
            reply("", tool_call("lookup", customer="ann"), tool_call("refund", amount=5)),
            reply("", tool_call("set_output", key="tier", value="gold")),
            reply("done"),
        ]
    )


async def test_tools_named_by_import_path_are_imported_under_allow_imports(
    tmp_path: Path,
) -> None:
    spec = graph("tests.runtime.tool_module:lookup", "tests.runtime.tool_module:refund")
    async with Runtime(
        tmp_path / "runs.db", provider=model(), allow_imports=["tests.runtime.tool_module"]
    ) as rt:
        result = await (await rt.start(spec)).result()
        events = await rt.read_events(result.run_id)
    assert result.status == "completed" and result.memory["tier"] == "gold"
    # The model saw and called the tools by their own names; both ran.
    results = {e.body.name: e.body.content for e in events if isinstance(e.body, ToolResult)}
    assert "gold" in results["lookup"] and results["refund"] == "refunded 5"


async def test_a_tool_path_outside_allow_imports_is_refused_naming_the_flag(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", provider=model()) as rt:
        with pytest.raises(SpecErrors, match=r"nodes\[0\]\.tools\[0\]") as refused:
            await rt.start(graph("tests.runtime.tool_module:lookup"))
    assert "importing from module 'tests.runtime.tool_module' is not allowed" in str(refused.value)
    assert "--allow-imports tests.runtime.tool_module" in str(refused.value)


async def test_a_tool_path_to_something_defined_elsewhere_is_refused(tmp_path: Path) -> None:
    # `tool` is imported into the module from the runtime: not defined in an allowed module.
    async with Runtime(
        tmp_path / "runs.db", provider=model(), allow_imports=["tests.runtime.tool_module"]
    ) as rt:
        with pytest.raises(SpecErrors, match=r"defined in module 'runtime\.llm"):
            await rt.start(graph("tests.runtime.tool_module:tool"))
