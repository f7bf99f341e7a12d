"""A fork's report counts its own verdicts, not those copied from its source's log (as it
counts its own turns and tokens): the copied ones are in the source's report."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import LlmResponse, Runtime, ScriptedProvider
from runtime.events import EdgeTaken, Verdict
from runtime.reads import RunReader

from .test_llm_node import edge, graph, llm, set_output

pytestmark = pytest.mark.anyio


def visit(key: str) -> list[LlmResponse]:
    """A node's turns: text without its output (a structural RETRY), a tool turn setting
    it (the bail-out: not counted), then text (ACCEPT)."""
    return [
        LlmResponse(text="thinking", stop="end"),
        LlmResponse(tool_calls=[set_output(key, "v")], stop="tool_use"),
        LlmResponse(text="done", stop="end"),
    ]


async def test_a_forks_report_counts_its_own_verdicts_only(tmp_path: Path) -> None:
    two = graph([llm("a", output_keys=["a"]), llm("b", output_keys=["b"])], [edge("a", "b")])
    done_b = [
        LlmResponse(tool_calls=[set_output("b", "v")], stop="tool_use"),
        LlmResponse(text="ok"),
    ]
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider([*visit("a"), *done_b])) as rt:
        source = await (await rt.start(two)).result()
        events = await rt.read_events(source.run_id)
    assert source.status == "completed"
    # The fork starts after `a`'s edge: `a`'s verdicts are copied, `b` runs again.
    [after_a] = [e.seq for e in events if isinstance(e.body, EdgeTaken)]
    copied = [e.body for e in events[:after_a] if isinstance(e.body, Verdict)]
    assert [v.action for v in copied] == ["retry", "retry", "accept"]  # one a bail-out
    async with Runtime(tmp_path / "r.db", provider=ScriptedProvider(visit("b"))) as rt:
        fork = await rt.fork(source.run_id, after_a)
        forked = await fork.result()
        assert rt.store is not None
        reader = RunReader(rt.store)
        source_report = await reader.report(source.run_id)
        fork_report = await reader.report(fork.run_id)
        fork_events = await rt.read_events(fork.run_id)
    assert forked.status == "completed"
    assert source_report.verdicts == {"retry": 1, "accept": 2}
    # The fork's log holds both nodes' verdicts; its report counts `b`'s, its own.
    in_log = [e.body.action for e in fork_events if isinstance(e.body, Verdict)]
    assert in_log.count("accept") == 2
    # Before, the copy of `a`'s RETRY and ACCEPT were counted too: {"retry": 2, "accept": 2}.
    assert fork_report.verdicts == {"retry": 1, "accept": 1}
    assert fork_report.turns == 3
