"""How the executor follows a finished node's edges: to one node, into a fan-out of
branches, along a branch, and back at the join. Conflicts between branches' memory writes
are settled here, in the order branches finish."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors import ActorRef
from eventstore import EventBody

from ..events._catalogue import BranchesForked, BranchesJoined, FinishedStatus, MemoryWritten
from ..spec._model import GraphSpec
from ._edges import Route
from ._fanout import FanOut, convergence_node
from ._messages import NodeDone

__all__ = ["EdgeSteps"]


class EdgeSteps:
    """The part of the executor that moves a run along its edges."""

    graph: GraphSpec
    fanout: FanOut | None
    terminal_nodes: frozenset[str]
    reducers: dict[str, str]
    running: dict[str, tuple[int, str | None]]
    node_refs: dict[str, ActorRef]

    if TYPE_CHECKING:

        def emit(self, body: EventBody) -> None: ...

        def _emit_edge(self, source: str, route: Route) -> None: ...

        async def _start_node(
            self, node_id: str, branch: str | None, *, attempt: int = 1, rerun: bool = False
        ) -> None: ...

        async def _finish(self, status: FinishedStatus, error: str | None) -> None: ...

    async def _advance(self, done: NodeDone, routes: list[Route]) -> None:
        node_id, branch = done.node_id, done.branch
        if branch is not None and self.fanout is not None:
            await self._advance_branch(done, routes, self.fanout)
            return
        if done.success and node_id in self.terminal_nodes:
            await self._finish("completed", None)
            return
        if not routes:
            if not done.success:
                await self._finish("failed", f"node {node_id!r} failed: {failure(done)}")
            elif self.graph.terminal_nodes:
                await self._finish(
                    "failed", f"no edge out of {node_id!r} fired and it is not a terminal node"
                )
            else:
                await self._finish("completed", None)
            return
        for route in routes:
            self._emit_edge(node_id, route)
        # Two edges to one node start it once.
        targets = list(dict.fromkeys(r.target for r in routes))
        if len(targets) == 1:
            await self._start_node(targets[0], None)
            return
        fan = FanOut(source=node_id, join=convergence_node(self.graph, targets))
        # A branch that starts at the join has already arrived: the join runs once, after
        # the other branches.
        fan.branches = {t: "done" if t == fan.join else "running" for t in targets}
        self.fanout = fan
        self.emit(
            BranchesForked(
                source=node_id, targets=targets, join=fan.join, policy=self.graph.fan_out_policy
            )
        )
        for target in targets:
            if target != fan.join:
                await self._start_node(target, target)
        await self._maybe_join(fan)  # joins at once if every target was the join

    async def _advance_branch(self, done: NodeDone, routes: list[Route], fan: FanOut) -> None:
        branch = done.branch
        assert branch is not None
        if not done.success and not routes:
            await self._branch_failed(fan, branch, f"node {done.node_id!r} failed: {failure(done)}")
            return
        if len(routes) > 1:
            await self._branch_failed(
                fan, branch, f"node {done.node_id!r} fans out inside a branch (not supported)"
            )
            return
        if not routes or routes[0].target == fan.join:
            for route in routes:
                self._emit_edge(done.node_id, route)
            fan.branches[branch] = "done"
            self._settle_writes(fan, branch)
            await self._maybe_join(fan)
            return
        self._emit_edge(done.node_id, routes[0])
        await self._start_node(routes[0].target, branch)

    def _settle_writes(self, fan: FanOut, branch: str) -> None:
        """Conflicts go by the order branches finish (the seed): with ``last_wins`` the
        finishing branch's values of replaced keys go back into memory if another branch
        wrote them since; with ``first_wins`` the first branch to finish claims its keys
        (later writes of others are dropped) and its values go back likewise."""
        strategy = self.graph.conflict_strategy
        if strategy == "error":
            return
        for key, (value, node_id) in fan.values.get(branch, {}).items():
            if strategy == "first_wins" and fan.claims.setdefault(key, branch) != branch:
                continue
            if fan.last_writer.get(key) != branch and self.reducers.get(key) in (None, "replace"):
                self.emit(
                    MemoryWritten(
                        key=key, value=value, op="replace", node_id=node_id, branch=branch
                    )
                )
                fan.last_writer[key] = branch

    async def _branch_failed(self, fan: FanOut, branch: str, error: str) -> None:
        fan.branches[branch] = "failed"
        fan.errors[branch] = error
        if self.graph.fan_out_policy == "fail_all":
            # Cancel the other branches at once; their partial work is not merged.
            for node_id, (_attempt, node_branch) in list(self.running.items()):
                if node_branch is not None:
                    await self.node_refs[node_id].stop()
                    del self.running[node_id]
                    fan.branches[node_branch] = "failed"
                    fan.errors.setdefault(node_branch, "cancelled: another branch failed")
            self._emit_join(fan)
            await self._finish("failed", f"branch {branch!r} failed: {error}")
            return
        await self._maybe_join(fan)

    def _emit_join(self, fan: FanOut) -> None:
        self.emit(
            BranchesJoined(
                join=fan.join,
                completed=[b for b, s in fan.branches.items() if s == "done"],
                failed=[b for b, s in fan.branches.items() if s == "failed"],
            )
        )

    async def _maybe_join(self, fan: FanOut) -> None:
        if any(state == "running" for state in fan.branches.values()):
            return
        self.fanout = None
        self._emit_join(fan)
        failed = [b for b, s in fan.branches.items() if s == "failed"]
        succeeded = [b for b, s in fan.branches.items() if s == "done"]
        if failed and (self.graph.fan_out_policy == "wait_all" or not succeeded):
            details = "; ".join(f"{b}: {fan.errors[b]}" for b in failed)
            await self._finish("failed", f"branches failed: {details}")
            return
        if fan.join is None:
            await self._finish("completed", None)
            return
        await self._start_node(fan.join, None)


def failure(done: NodeDone) -> str:
    """A failed node's error as the run reports it: ``KeyError: 'name'``, not ``'name'``."""
    error, kind = done.error or "", done.error_type
    if not kind or kind == "Error" or error == kind or error.startswith(f"{kind}:"):
        return error or kind or "failed"
    return f"{kind}: {error}"
