"""A node's outputs as the run's memory writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events._catalogue import MemoryWritten
from ..events._memory import disown_values
from ._join import FanOutJoin
from ._messages import NodeDone
from ._runlog import RunLog

__all__ = ["OutputWrites"]


class OutputWrites:
    """Records a finished node's outputs as ``memory.written`` events (each with its key's
    reducer), on the main path here and inside an open fan-out through the join, which
    settles the branches' conflicts."""

    __slots__ = ("join", "log", "reducers")

    def __init__(self, log: RunLog, join: FanOutJoin, reducers: Mapping[str, str]) -> None:
        self.log = log
        self.join = join
        self.reducers = reducers

    def node_outputs(self, done: NodeDone) -> str | None:
        """Stage the memory writes of a successful node; return an error on a conflict."""
        # A returned list may be one the state grows in place (the node got it as input).
        disown_values(self.log.state, done.outputs.values())
        if done.branch is not None and self.join.fan is not None:
            return self.join.write_outputs(done)
        for key, value in done.outputs.items():
            self.write(key, value, done.node_id, done.branch)
        return None

    def write(self, key: str, value: Any, node_id: str, branch: str | None) -> None:
        """Stage one write of ``key`` by ``node_id``."""
        op = self.reducers.get(key, "replace")
        self.log.stage(MemoryWritten(key=key, value=value, op=op, node_id=node_id, branch=branch))
