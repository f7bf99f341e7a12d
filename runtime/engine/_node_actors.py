"""The node actors of one run: which actor runs a node, built on first use, stopped with
the run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from actors import Actor, ActorRef, Terminated

from ..spec._model import GraphSpec, NodeSpec
from ._messages import NodeDone
from ._runlog import RunLog

__all__ = ["MAIN_LANE", "PLAIN_KINDS", "NodeActors", "NodeFactory"]

#: Builds a node actor of one run: (graph, spec, executor ref, run log) -> actor. Plain
#: nodes (function, router) share one actor per lane (main path or branch), built from the
#: lane's first node; every other kind gets an actor of its own.
NodeFactory = Callable[[GraphSpec, NodeSpec, ActorRef, RunLog], Actor]
PLAIN_KINDS = ("function", "router")
MAIN_LANE = "lane:None"  # the actor key of the main path's plain nodes


#: The by-key map of a run with only its main lane (never changed in place: replaced).
_NO_REFS: dict[str, ActorRef] = {}


class NodeActors:
    """The node actors of a run's executor, which the executor (passed to
    :meth:`actor_for`, not held) spawns and watches.

    The main path's lane actor is a field of its own and the other actors (a fan-out's
    lanes, non-plain nodes) a map made on first use; each node maps to its actor's key
    (strings only: a map the cyclic collector does not track): most runs hold no tracked
    container here."""

    __slots__ = ("by_key", "by_node", "factory", "graph", "log", "main")

    def __init__(self, *, graph: GraphSpec, log: RunLog, factory: NodeFactory):
        self.graph = graph
        self.log = log
        self.factory = factory
        self.main: ActorRef | None = None  # the main path's lane
        self.by_key = _NO_REFS  # actor key (another lane or a node) -> actor
        self.by_node: dict[str, str] = {}  # node id -> the key of the actor that runs it

    def _get(self, key: str) -> ActorRef | None:
        return self.main if key == MAIN_LANE else self.by_key.get(key)

    def actor_for(self, owner: Actor, spec: NodeSpec, branch: str | None) -> ActorRef:
        """The actor to run ``spec``'s node in ``branch``, spawned by the executor
        ``owner`` if there is none."""
        if spec.kind not in PLAIN_KINDS:
            key = f"node:{spec.id}"
            ref = self.by_key.get(key)
        elif branch is None:  # the main lane: most steps
            key = MAIN_LANE
            ref = self.main
        else:
            key = f"lane:{branch}"
            ref = self.by_key.get(key)
        if ref is None or ref.stopped:
            ref = owner.system.spawn(
                self.factory(self.graph, spec, owner.ref, self.log), watcher=owner.ref
            )
            if key == MAIN_LANE:
                self.main = ref
            else:
                if self.by_key is _NO_REFS:
                    self.by_key = {}
                self.by_key[key] = ref
        self.by_node[spec.id] = key
        return ref

    async def stop(self, node_id: str) -> None:
        """Stop the actor running ``node_id`` (and the lane it runs in); waits for it."""
        ref = self._get(self.by_node[node_id])
        assert ref is not None  # it ran the node
        await ref.stop()

    def crashed(
        self, note: Terminated, running: Mapping[str, tuple[int, str | None]]
    ) -> NodeDone | None:
        """The attempt that the end of a node actor ``note`` tells of failed for good, if
        any (None: the actor was stopped, or runs none of the ``running`` nodes)."""
        if note.error is None:
            return None  # the executor stopped it
        for node_id, key in self.by_node.items():
            ref = self._get(key)
            if ref is not None and ref.name == note.actor and node_id in running:
                attempt, branch = running[node_id]
                done = NodeDone(node_id=node_id, attempt=attempt, branch=branch, success=False)
                return done.failed(f"node actor crashed: {note.error}", "NodeCrashed")
        return None

    def stop_all(self) -> None:
        """Stop every node actor; nothing waits for them to be gone."""
        if self.main is not None:
            self.main.stop_nowait()
        for ref in self.by_key.values():
            ref.stop_nowait()
