"""The node actors of one run: which actor runs a node, built on first use, stopped with
the run."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

from actors import Actor, ActorRef, Terminated

from ..spec._model import GraphSpec, NodeSpec
from ._messages import NodeDone
from ._runlog import RunLog

__all__ = ["NodeActors", "NodeFactory"]

#: Builds a node actor of one run: (graph, spec, executor ref, run log) -> actor. Plain
#: nodes (function, router) share one actor per lane (main path or branch), built from the
#: lane's first node; every other kind gets an actor of its own.
NodeFactory = Callable[[GraphSpec, NodeSpec, ActorRef, RunLog], Actor]
PLAIN_KINDS = ("function", "router")
_MAIN_LANE = "lane:None"  # the actor key of the main path's plain nodes


class NodeActors:
    """The node actors the executor ``owner`` spawns and watches."""

    __slots__ = ("by_key", "by_node", "factory", "graph", "log", "owner")

    def __init__(self, *, owner: Actor, graph: GraphSpec, log: RunLog, factory: NodeFactory):
        # A weak reference: the executor holds this, and a cycle would leave every
        # finished run to the cyclic garbage collector.
        self.owner = weakref.ref(owner)
        self.graph = graph
        self.log = log
        self.factory = factory
        self.by_key: dict[str, ActorRef] = {}  # actor key (lane or node) -> actor
        self.by_node: dict[str, ActorRef] = {}  # node id -> the actor that runs it

    def actor_for(self, spec: NodeSpec, branch: str | None) -> ActorRef:
        """The actor to run ``spec``'s node in ``branch``, spawned if there is none."""
        if spec.kind not in PLAIN_KINDS:
            key = f"node:{spec.id}"
        else:
            key = _MAIN_LANE if branch is None else f"lane:{branch}"
        ref = self.by_key.get(key)
        if ref is None or ref.stopped:
            owner = self.owner()
            assert owner is not None  # it is starting a node
            ref = owner.system.spawn(
                self.factory(self.graph, spec, owner.ref, self.log), watcher=owner.ref
            )
            self.by_key[key] = ref
        self.by_node[spec.id] = ref
        return ref

    async def stop(self, node_id: str) -> None:
        """Stop the actor running ``node_id`` (and the lane it runs in); waits for it."""
        await self.by_node[node_id].stop()

    def crashed(
        self, note: Terminated, running: Mapping[str, tuple[int, str | None]]
    ) -> NodeDone | None:
        """The attempt that the end of a node actor ``note`` tells of failed for good, if
        any (None: the actor was stopped, or runs none of the ``running`` nodes)."""
        if note.error is None:
            return None  # the executor stopped it
        for node_id, ref in self.by_node.items():
            if ref.name == note.actor and node_id in running:
                attempt, branch = running[node_id]
                done = NodeDone(node_id=node_id, attempt=attempt, branch=branch, success=False)
                return done.failed(f"node actor crashed: {note.error}", "NodeCrashed")
        return None

    def stop_all(self) -> None:
        """Stop every node actor; nothing waits for them to be gone."""
        for ref in self.by_key.values():
            ref.stop_nowait()
