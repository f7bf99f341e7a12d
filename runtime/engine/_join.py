"""The run's fan-out as the executor works it: the fork, the branches' memory writes, the
settling of their conflicts (in the order branches finish), each branch's arrival or
failure, and the join.

The log's record of the fan-out (``RunState.fanout``, applied as each event is staged)
holds the branches' writes; :class:`FanOutJoin` reads it and keeps only what the walk
decides beyond it (:class:`FanOut`). Each step answers with a :data:`JoinOutcome` the
executor acts on: start a node, end the run, stop the other branches, or nothing yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..events._catalogue import BranchesForked, BranchesJoined, FinishedStatus, MemoryWritten
from ..events._fanout import OpenFanOut
from ..events._memory import disown_values
from ..events._state import RunState
from ..spec._branches import convergence_node
from ..spec._model import GraphSpec
from ._edges import Route, edge_taken
from ._failures import failure
from ._fanout import FanOut, resumed_fanout
from ._messages import NodeDone
from ._runlog import RunLog

__all__ = ["EndRun", "FanOutJoin", "JoinOutcome", "StartNode", "StopBranches"]


class StartNode(msgspec.Struct, frozen=True, gc=False):
    """Start ``node_id`` (in ``branch``, or on the main path: the join)."""

    node_id: str
    branch: str | None


class EndRun(msgspec.Struct, frozen=True, gc=False):
    """End the run with ``status``."""

    status: FinishedStatus
    error: str | None


class StopBranches(msgspec.Struct, frozen=True, gc=False):
    """``fail_all``: stop every branch's running node, then :meth:`FanOutJoin.cancel`."""

    error: str


#: What a step of the fan-out leads to; None: nothing yet (branches still run).
JoinOutcome = StartNode | EndRun | StopBranches | None


class FanOutJoin(msgspec.Struct, gc=False):
    """The open fan-out of one run, if any (at most one is open at a time), and where a
    finished node's outputs become the run's memory writes, in a fan-out or not.

    Untracked by the cyclic collector (``gc=False``): it holds the graph, the run's state,
    the reducers and the fan-out's working set (strings and plain values), none of which
    refers to it, so it can never be part of a reference cycle; the run's log, which
    reaches the runtime (and so the run's executor, which holds this), is passed to the
    calls that record anything."""

    graph: GraphSpec
    state: RunState
    reducers: Mapping[str, str]
    #: The working set of the open fan-out (None: none is open).
    fan: FanOut | None = None

    def _record(self) -> OpenFanOut:
        record = self.state.fanout
        assert record is not None  # open from BranchesForked to BranchesJoined, as ``fan``
        return record

    def fork(self, log: RunLog, source: str, targets: list[str]) -> list[str]:
        """Open a fan-out of ``targets`` out of ``source``; return the branches to start
        (each named after its first node). Follow with :meth:`maybe_join`."""
        fan = FanOut(source=source, join=convergence_node(self.graph, targets))
        # A branch that starts at the join has already arrived: the join runs once, after
        # the other branches.
        fan.branches = {t: "done" if t == fan.join else "running" for t in targets}
        self.fan = fan
        log.stage(
            BranchesForked(
                source=source, targets=targets, join=fan.join, policy=self.graph.fan_out_policy
            )
        )
        return [target for target in targets if target != fan.join]

    def resume(self, pending: list[str]) -> list[tuple[str, str | None]]:
        """Continue the resumed run's open fan-out, if any: the nodes due, each with its
        branch (the join waits for the branches). Follow with :meth:`maybe_join`."""
        record = self.state.fanout
        if record is None:
            return [(node, None) for node in pending]
        fan = self.fan = resumed_fanout(record, self.graph.conflict_strategy)
        starts: list[tuple[str, str | None]] = [
            (node, record.node_branch.get(node, node)) for node in pending if node != fan.join
        ]
        live = {branch for _, branch in starts}
        for branch, status in fan.branches.items():
            if status == "running" and branch not in live:
                fan.branches[branch] = "done"  # it ended without reaching the join
        return starts

    def node_outputs(self, log: RunLog, done: NodeDone) -> str | None:
        """Stage the memory writes of a successful node (each with its key's reducer), on
        the main path here, inside an open fan-out settling the branches' conflicts;
        return an error on a conflict."""
        # A returned list may be one the state grows in place (the node got it as input).
        disown_values(log.state, done.outputs.values())
        if done.branch is not None and self.fan is not None:
            return self.write_outputs(log, done)
        for key, value in done.outputs.items():
            self.write(log, key, value, done.node_id, done.branch)
        return None

    def write(self, log: RunLog, key: str, value: Any, node_id: str, branch: str | None) -> None:
        """Stage one write of ``key`` by ``node_id``."""
        op = self.reducers.get(key, "replace")
        log.stage(MemoryWritten(key=key, value=value, op=op, node_id=node_id, branch=branch))

    def write_outputs(self, log: RunLog, done: NodeDone) -> str | None:
        """Record the memory writes of a branch's node; return an error on a conflict."""
        fan, branch = self.fan, done.branch
        assert fan is not None and branch is not None
        first_writer = self._record().first_writer
        strategy = self.graph.conflict_strategy
        for key, value in done.outputs.items():
            if strategy == "error":
                first = first_writer.get(key, branch)
                if first != branch:
                    return (
                        f"memory key {key!r} written by branch {first!r} and by branch {branch!r}"
                    )
            elif fan.claims.get(key, branch) != branch:
                continue  # first_wins: a branch that wrote it has finished first
            op = self.reducers.get(key, "replace")
            log.stage(
                MemoryWritten(key=key, value=value, op=op, node_id=done.node_id, branch=branch)
            )
        return None

    def advance(self, log: RunLog, done: NodeDone, routes: list[Route]) -> JoinOutcome:
        """Follow the edges of a branch's finished node: along the branch, or to the join."""
        fan, branch = self.fan, done.branch
        assert fan is not None and branch is not None
        if not done.success and not routes:
            return self.branch_failed(log, branch, f"node {done.node_id!r} failed: {failure(done)}")
        if len(routes) > 1:
            return self.branch_failed(
                log, branch, f"node {done.node_id!r} fans out inside a branch (not supported)"
            )
        for route in routes:
            log.stage(edge_taken(done.node_id, route))
        if routes and routes[0].target != fan.join:
            return StartNode(routes[0].target, branch)
        fan.branches[branch] = "done"
        self._settle_writes(log, fan, branch)
        return self.maybe_join(log)

    def _settle_writes(self, log: RunLog, fan: FanOut, branch: str) -> None:
        """Conflicts go by the order branches finish (the seed): with ``last_wins`` the
        finishing branch's values of replaced keys go back into memory if another branch
        wrote them since; with ``first_wins`` the first branch to finish claims its keys
        (later writes of others are dropped) and its values go back likewise."""
        strategy = self.graph.conflict_strategy
        if strategy == "error":
            return
        record = self._record()
        # A list: a write recorded here replaces the branch's kept write of its key.
        for key, write in list(record.values.get(branch, {}).items()):
            if strategy == "first_wins" and fan.claims.setdefault(key, branch) != branch:
                continue
            if record.last_writer.get(key) != branch and self.reducers.get(key) in (
                None,
                "replace",
            ):
                log.stage(
                    MemoryWritten(
                        key=key,
                        value=write.value,
                        op="replace",
                        node_id=write.node_id,
                        branch=branch,
                    )
                )

    def branch_failed(self, log: RunLog, branch: str, error: str) -> JoinOutcome:
        """``branch`` failed for good with ``error``."""
        fan = self.fan
        assert fan is not None
        fan.branches[branch] = "failed"
        fan.errors[branch] = error
        if self.graph.fan_out_policy == "fail_all":
            # The other branches are cancelled at once; their partial work is not merged.
            return StopBranches(f"branch {branch!r} failed: {error}")
        return self.maybe_join(log)

    def fail_run(self, branch: str, error: str) -> StopBranches:
        """``branch`` failed with ``error`` that fails the run whatever the fan-out policy
        (an edge expression that raised): the other branches are stopped."""
        fan = self.fan
        assert fan is not None
        fan.branches[branch] = "failed"
        fan.errors[branch] = error
        return StopBranches(f"branch {branch!r} failed: {error}")

    def cancel(self, log: RunLog, branches: list[str], outcome: StopBranches) -> EndRun:
        """``fail_all``: the running nodes of ``branches`` are stopped; the run fails."""
        fan = self.fan
        assert fan is not None
        for branch in branches:
            fan.branches[branch] = "failed"
            fan.errors.setdefault(branch, "cancelled: another branch failed")
        self._join(log, fan)
        return EndRun("failed", outcome.error)

    def maybe_join(self, log: RunLog) -> JoinOutcome:
        """Join once no branch runs: start the join node, or end the run."""
        fan = self.fan
        if fan is None or any(state == "running" for state in fan.branches.values()):
            return None
        ends = self._ends(fan) if fan.join is None else []
        self._join(log, fan)
        failed = [b for b, s in fan.branches.items() if s == "failed"]
        succeeded = [b for b, s in fan.branches.items() if s == "done"]
        if failed and (self.graph.fan_out_policy == "wait_all" or not succeeded):
            details = "; ".join(f"{b}: {fan.errors[b]}" for b in failed)
            return EndRun("failed", f"branches failed: {details}")
        if fan.join is None:
            terminal = self.graph.terminal_set()
            if terminal and not terminal.intersection(ends):
                # As on the main path: a graph that names its terminal nodes completes
                # only at one of them; here, at the end of one branch at least.
                shown = ", ".join(repr(n) for n in ends)
                error = f"no branch ended at a terminal node (they ended at {shown})"
                return EndRun("failed", error)
            return EndRun("completed", None)
        return StartNode(fan.join, None)

    def _ends(self, fan: FanOut) -> list[str]:
        """The nodes the successful branches of ``fan``, which has no join, ended at (each
        one's last node to finish, from the log's record: the same after a resume)."""
        record = self._record()
        path = self.state.path
        ends: list[str] = []
        for branch, status in fan.branches.items():
            if status == "done":
                last = next(
                    (n for n in reversed(path) if record.node_branch.get(n) == branch), None
                )
                if last is not None:
                    ends.append(last)
        return ends

    def _join(self, log: RunLog, fan: FanOut) -> None:
        self.fan = None
        log.stage(
            BranchesJoined(
                join=fan.join,
                completed=[b for b, s in fan.branches.items() if s == "done"],
                failed=[b for b, s in fan.branches.items() if s == "failed"],
            )
        )
