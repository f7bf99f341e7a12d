"""The choices of llm_decide edges under way: each asks a model in a task of its own and
answers the executor with :class:`EdgeDecided`, so the executor never waits on a model."""

from __future__ import annotations

import weakref

import anyio

from actors import Actor, ActorStoppedError

from ..providers._base import LlmProvider
from ..spec._model import GraphSpec
from ._edges import decide_edge
from ._messages import EdgeDecided, NodeDone

__all__ = ["EdgeChoices"]


class EdgeChoices:
    """The model calls choosing finished nodes' edges, for the executor ``owner``."""

    __slots__ = ("graph", "owner", "provider", "scopes")

    def __init__(self, *, owner: Actor, graph: GraphSpec, provider: LlmProvider | None) -> None:
        # A weak reference: the executor holds this, and a cycle would leave every
        # finished run to the cyclic garbage collector.
        self.owner = weakref.ref(owner)
        self.graph = graph
        self.provider = provider
        #: node -> the scope of the model call choosing its edge.
        self.scopes: dict[str, anyio.CancelScope] = {}

    def ask(self, done: NodeDone) -> None:
        """Start choosing the edge out of ``done``'s node; the answer comes as a message."""
        scope = anyio.CancelScope()
        self.scopes[done.node_id] = scope
        owner = self.owner()
        assert owner is not None  # it is asking
        owner.system.start_task(self._decide, done, scope)

    async def _decide(self, done: NodeDone, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                route = await decide_edge(self.graph, done.node_id, done.outputs, self.provider)
            except Exception as exc:  # handed to the executor, which fails the run with it
                answer = EdgeDecided(done=done, answer=exc)
            else:
                answer = EdgeDecided(done=done, answer=route)
            owner = self.owner()
            try:
                if owner is not None:
                    await owner.ref.tell(answer)
            except ActorStoppedError:
                pass  # the run stopped meanwhile: the answer has no one to go to

    def answered(self, node_id: str) -> None:
        """The choice for ``node_id`` came back."""
        self.scopes.pop(node_id, None)

    def stop(self) -> None:
        """Cancel every choice under way (their answers are not awaited)."""
        for scope in self.scopes.values():
            scope.cancel()
        self.scopes.clear()
