"""Plain nodes: a Python callable (function node) or a pass-through (router)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from actors import Actor, ActorRef, MailboxFullError

from ._events import OutputSet
from ._messages import ExecuteNode, NodeDone
from ._runlog import RunLog
from ._spec import GraphSpec, NodeSpec

__all__ = ["FunctionNodeActor", "NodeContext", "PlainFunction"]


class NodeContext:
    """Given to a node callable that takes a second parameter.

    ``await ctx.set_output(key, value)`` records a partial output (an OutputSet event) as
    soon as it is known: if the run is cancelled before the node returns, recorded partial
    outputs are flushed into memory, so long work is not lost.
    """

    def __init__(self, log: RunLog, node_id: str, attempt: int, visit: int) -> None:
        self.run_id = log.run_id
        self.node_id = node_id
        self.attempt = attempt
        self.visit = visit
        self._log = log

    async def set_output(self, key: str, value: Any) -> None:
        """Record ``key = value`` in this node's output accumulator; waits for the commit."""
        await self._log.append([OutputSet(node_id=self.node_id, key=key, value=value)])


class FunctionNodeActor(Actor):
    """Runs plain nodes (functions and routers) and tells the executor NodeDone.

    One such actor serves one lane of a run (the main path, or one branch of a fan-out):
    a lane runs one node at a time, so one mailbox per lane keeps branches concurrent
    without spawning an actor for every node.

    A node's callable receives one dict (the node's input keys read from memory, or all of
    memory when it declares none) and, if it takes a second parameter, a
    :class:`NodeContext`; it returns a mapping of outputs (or None). It may be async or
    sync; a sync callable runs inline, so it must not block. A router without a callable
    returns no outputs: its outgoing edges decide on memory alone.

    Outputs are checked against ``output_keys``: an undeclared key, or a declared
    non-nullable key that is missing, is a failure (and so is retried by the executor).
    """

    def __init__(
        self,
        graph: GraphSpec,
        resolve: Callable[[NodeSpec], PlainFunction | None],
        executor: ActorRef,
        log: RunLog,
    ) -> None:
        self.graph = graph
        self.specs = graph.node_map()
        self.resolve = resolve
        self.executor = executor
        self.log = log

    async def receive(self, message: Any) -> Any:
        assert isinstance(message, ExecuteNode)
        spec = self.specs[message.node_id]
        try:
            # The call is made here, not in a helper coroutine: this is every plain step.
            plain = self.resolve(spec)
            if plain is None:
                result: Any = None
            elif plain.wants_context:
                context = NodeContext(self.log, message.node_id, message.attempt, message.visit)
                result = plain.function(message.inputs, context)
            else:
                result = plain.function(message.inputs)
            if type(result) is not dict and inspect.isawaitable(result):
                result = await result
            outputs = _checked_outputs(spec, result)
        except Exception as exc:  # reported to the executor, which records and retries it
            done = NodeDone(
                node_id=message.node_id,
                attempt=message.attempt,
                branch=message.branch,
                success=False,
                error=str(exc) or type(exc).__name__,
                error_type=type(exc).__name__,
            )
        else:
            done = NodeDone(
                node_id=message.node_id,
                attempt=message.attempt,
                branch=message.branch,
                success=True,
                outputs=outputs,
            )
        try:
            self.executor.tell_nowait(done)  # no coroutine on every step's path
        except MailboxFullError:
            await self.executor.tell(done)  # waits for room


def _checked_outputs(spec: NodeSpec, result: Any) -> dict[str, Any]:
    """The node's outputs (a copy) if ``result`` is a valid return value, else raise."""
    if result is None:
        return {}
    if type(result) is not dict and not isinstance(result, Mapping):
        raise TypeError(
            f"node {spec.id!r} returned {type(result).__name__}; "
            "a node returns a mapping of output keys (or None)"
        )
    outputs = dict(result)
    declared = spec.output_keys
    if declared:
        extra = sorted(set(outputs) - set(declared))
        if extra:
            raise KeyError(f"node {spec.id!r} returned undeclared output keys: {extra}")
        missing = [k for k in declared if k not in outputs and k not in spec.nullable_keys]
        if missing:
            raise KeyError(f"node {spec.id!r} did not return output keys: {missing}")
    return outputs


class PlainFunction:
    """A resolved node callable and whether it takes a NodeContext (computed once)."""

    __slots__ = ("function", "wants_context")

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.wants_context = _arity(function) >= 2


def _arity(function: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 2
    return sum(1 for p in parameters if p.kind in positional)
