"""What a control from outside a run's executor writes for it: a cancel's flush of the
running nodes' partial outputs, and the resume point it names."""

from __future__ import annotations

from collections.abc import Sequence

from eventstore import EventBody

from ..events._catalogue import MemoryWritten
from ..events._state import RunState
from ..spec._load import graph_from_dict

__all__ = ["first", "partial_outputs"]


def partial_outputs(state: RunState) -> list[EventBody]:
    """The memory writes that flush the partial outputs of the nodes running in
    ``state`` (outside a fan-out), as the executor's own cancel does: a cancel from any
    process keeps the same work."""
    if state.fanout is not None or state.graph is None:
        return []
    reducers = {key.name: key.reducer for key in graph_from_dict(state.graph).memory}
    return [
        MemoryWritten(key=key, value=value, op=reducers.get(key, "replace"), node_id=node_id)
        for node_id in state.running
        for key, value in state.outputs.get(node_id, {}).items()
    ]


def first(items: Sequence[str]) -> str | None:
    return items[0] if items else None
