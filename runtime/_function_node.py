"""Plain nodes: a Python callable (function node) or a pass-through (router)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from actors import Actor, ActorRef
from eventstore import OutputSet

from ._messages import ExecuteNode, NodeDone
from ._runlog import RunLog
from ._spec import NodeSpec

__all__ = ["FunctionNodeActor", "NodeContext"]


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
    """Runs a plain node's callable once per ExecuteNode and tells the executor NodeDone.

    The callable receives one dict (the node's input keys read from memory, or all of
    memory when it declares none) and returns a mapping of outputs (or None). It may be
    async or sync; a sync callable runs inline, so it must not block. A router without a
    callable returns no outputs: its outgoing edges decide on memory alone.

    Outputs are checked against ``output_keys``: an undeclared key, or a declared
    non-nullable key that is missing, is a failure (and so is retried by the executor).
    """

    def __init__(
        self,
        spec: NodeSpec,
        function: Callable[..., Any] | None,
        executor: ActorRef,
        log: RunLog,
    ) -> None:
        self.spec = spec
        self.function = function
        self.executor = executor
        self.log = log
        self.wants_context = function is not None and _arity(function) >= 2

    async def receive(self, message: Any) -> Any:
        assert isinstance(message, ExecuteNode)
        try:
            outputs = await self._call(message)
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
        await self.executor.tell(done)

    async def _call(self, message: ExecuteNode) -> dict[str, Any]:
        if self.function is None:
            return {}
        if self.wants_context:
            context = NodeContext(self.log, message.node_id, message.attempt, message.visit)
            result = self.function(message.inputs, context)
        else:
            result = self.function(message.inputs)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            result = {}
        if not isinstance(result, Mapping):
            raise TypeError(
                f"node {self.spec.id!r} returned {type(result).__name__}; "
                "a node returns a mapping of output keys (or None)"
            )
        outputs = dict(result)
        declared = self.spec.output_keys
        if declared:
            extra = sorted(set(outputs) - set(declared))
            if extra:
                raise KeyError(f"node {self.spec.id!r} returned undeclared output keys: {extra}")
            missing = [k for k in declared if k not in outputs and k not in self.spec.nullable_keys]
            if missing:
                raise KeyError(f"node {self.spec.id!r} did not return output keys: {missing}")
        return outputs


def _arity(function: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 2
    return sum(1 for p in parameters if p.kind in positional)
