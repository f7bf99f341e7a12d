"""An open fan-out as the log made it: the branches, how each ended, and their memory writes.

:func:`fanout_apply` is the part of ``apply`` for the events inside a fan-out; a
``BranchesForked`` opens one (:func:`fanout_opened`) and a ``BranchesJoined`` (or the
run's end) closes it. A resume continues the fan-out from this record, so it reads the
run's snapshot and the events after it, like any other resume.

What the record shows (the executor decides the rest as it walks):

- a branch is ``running`` from the fork, ``done`` once it takes an edge to the join (a
  branch that starts at the join is done at once), ``failed`` once one of its nodes fails
  for good;
- ``arrived`` lists the branches in the order they reached the join (conflicts between
  branches' writes go by that order);
- each memory write of a branch: the first branch to write a key, the last, and each
  branch's last value per key with the node that wrote it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from eventstore import EventBody

from ._catalogue import BranchesForked, EdgeTaken, MemoryWritten, NodeFailed, NodeStarted

__all__ = ["BranchStatus", "BranchWrite", "OpenFanOut", "fanout_apply", "fanout_opened"]

BranchStatus = Literal["running", "done", "failed"]


class BranchWrite(msgspec.Struct, frozen=True, kw_only=True):
    """A branch's last write of a memory key, and the node that wrote it."""

    value: Any
    node_id: str | None


class OpenFanOut(msgspec.Struct, kw_only=True):
    """A fan-out that forked and has not joined yet. Compare with ``==``."""

    source: str
    #: The node the branches meet at (None: they never meet, the run ends with them).
    join: str | None
    branches: dict[str, BranchStatus] = {}
    #: A failed branch's error (the failing node's, as the log recorded it).
    errors: dict[str, str] = {}
    arrived: list[str] = []
    #: Memory key -> the first branch that wrote it, and the last.
    first_writer: dict[str, str] = {}
    last_writer: dict[str, str] = {}
    #: Branch -> memory key -> its last write of that key.
    values: dict[str, dict[str, BranchWrite]] = {}
    #: Node -> the branch it runs in (started, or due after a branch's edge).
    node_branch: dict[str, str] = {}

    def copy(self) -> OpenFanOut:
        """A copy that shares no container with this one (the writes' values are shared)."""
        return msgspec.structs.replace(
            self,
            branches=dict(self.branches),
            errors=dict(self.errors),
            arrived=list(self.arrived),
            first_writer=dict(self.first_writer),
            last_writer=dict(self.last_writer),
            values={branch: dict(kept) for branch, kept in self.values.items()},
            node_branch=dict(self.node_branch),
        )


def fanout_opened(body: BranchesForked) -> OpenFanOut:
    """The fan-out a ``BranchesForked`` opens: one branch per target, named after it."""
    return OpenFanOut(
        source=body.source,
        join=body.join,
        branches={t: "done" if t == body.join else "running" for t in body.targets},
        node_branch={t: t for t in body.targets if t != body.join},
    )


def fanout_apply(fan: OpenFanOut, body: EventBody) -> None:
    """Apply one event inside the open fan-out ``fan`` to it, in place (called by apply)."""
    match body:
        case NodeStarted(branch=str(branch)):
            fan.node_branch[body.node_id] = branch
        case EdgeTaken():
            source_branch = fan.node_branch.get(body.source)
            if source_branch is None:
                return
            if body.target == fan.join:
                fan.branches[source_branch] = "done"
                fan.arrived.append(source_branch)
            else:
                fan.node_branch[body.target] = source_branch
        case NodeFailed(branch=str(branch), will_retry=False):
            fan.branches[branch] = "failed"
            fan.errors[branch] = body.error
        case MemoryWritten(branch=str(branch)):
            fan.first_writer.setdefault(body.key, branch)
            fan.last_writer[body.key] = branch
            kept = fan.values.get(branch)
            if kept is None:
                kept = fan.values[branch] = {}
            kept[body.key] = BranchWrite(value=body.value, node_id=body.node_id)
        case _:
            pass
