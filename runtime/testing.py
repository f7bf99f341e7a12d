"""A testing kit for users' own graphs: the scripted model, small-graph builders, replay
(folding a log again, and :func:`assert_replays`: a recorded run against today's graph).

Example::

    from runtime.testing import ScriptedProvider, reply, tool_call, linear_graph, replay

    provider = ScriptedProvider([reply("", tool_call("set_output", key="answer", value="42")),
                                 reply("done")])
    async with Runtime("test.db", provider=provider, functions={...}) as rt:
        result = await (await rt.start(graph)).result()
        state = await replay(rt, result.run_id)      # the fold of the log
        assert state.memory == result.memory
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from ._runtime import Runtime
from .events._state import RunState, fold
from .providers._scripted import ScriptedProvider, reply, tool_call
from .replay._report import ReplayReport
from .spec._model import EdgeSpec, GraphSpec, NodeSpec

__all__ = [
    "ScriptedProvider",
    "assert_replays",
    "function_node",
    "linear_graph",
    "replay",
    "reply",
    "tool_call",
]


def function_node(node_id: str, function: str | None = None, **fields: Any) -> NodeSpec:
    """A function node whose callable is the registered name ``function`` (default: its id)."""
    return NodeSpec(id=node_id, kind="function", function=function or node_id, **fields)


def linear_graph(
    nodes: Sequence[NodeSpec | str], *, graph_id: str = "test", **fields: Any
) -> GraphSpec:
    """A graph that runs ``nodes`` one after another (strings become function nodes)."""
    specs = [n if isinstance(n, NodeSpec) else function_node(n) for n in nodes]
    edges = [EdgeSpec(source=a.id, target=b.id) for a, b in pairwise(specs)]
    fields.setdefault("entry_node", specs[0].id)
    return GraphSpec(id=graph_id, nodes=specs, edges=edges, **fields)


async def replay(runtime: Runtime, run_id: str, *, at_seq: int | None = None) -> RunState:
    """Fold the run's recorded events again (no node or model is called): audit replay.

    Also checks the hash chain when the store can verify it, raising AssertionError with
    the store's reason if the log was edited.
    """
    events = await runtime.read_events(run_id, to_seq=at_seq)
    if runtime.store is not None:
        report = await runtime.store.verify(run_id)
        if not report.ok:
            raise AssertionError(f"log of run {run_id} fails verification: {report.reason}")
    return fold(events)


async def assert_replays(
    runtime: Runtime,
    run_id: str,
    graph: GraphSpec | None = None,
    *,
    rerun_functions: bool = False,
    allow_imports: Sequence[str] = (),
) -> ReplayReport:
    """Replay ``run_id`` against ``graph`` (:meth:`Runtime.replay`) and raise
    AssertionError with the report's summary when it diverges or stops; return the report
    (warnings allowed). No model, tool or function is called."""
    report = await runtime.replay(
        run_id, graph, rerun_functions=rerun_functions, allow_imports=allow_imports
    )
    if not report.equal:
        raise AssertionError(report.summary())
    return report
