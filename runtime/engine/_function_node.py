"""Plain nodes: a Python callable (function node) or a pass-through (router)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import Any, Final

import anyio

from actors import Actor, ActorRef, ActorStoppedError, MailboxFullError

from .._errors import NodeError, NodeTimeoutError
from ..events._catalogue import OutputSet
from ..events._values import check_memory_value
from ..spec._model import GraphSpec, NodeSpec
from ._deadline import AttemptDeadline
from ._messages import ExecuteNode, NodeDone
from ._node_call import PlainFunction, call_node, checked_outputs
from ._runlog import RunLog

__all__ = ["ABANDON_GRACE", "FunctionNodeActor", "NodeContext", "PlainFunction"]

#: The context of a lane made where no context variable is set (copied, never entered).
_NO_VARIABLES = contextvars.Context()

_log = logging.getLogger("magistrate.runtime")

#: How long a cancelled async node may take to unwind before it is abandoned.
ABANDON_GRACE: Final = 1.0


class NodeContext:
    """Given to a node callable that takes a second parameter.

    ``await ctx.set_output(key, value)`` records a partial output (an OutputSet event) as
    soon as it is known: if the run is cancelled before the node returns, recorded partial
    outputs are flushed into memory, so long work is not lost.

    ``ctx.pause_requested`` turns true once a pause of the run was asked for: the run
    pauses when the node returns. ``ctx.cancelled`` turns true once the runtime has
    abandoned this attempt (the run was cancelled, its node stopped, or the attempt
    passed its deadline). Code the runtime
    cannot interrupt (a plain ``def`` runs in a thread) polls it to stop early. An
    abandoned attempt is fenced: it records nothing more (``set_output`` raises
    :class:`NodeError`) and what it returns is dropped, so it can never overlap the next
    attempt's writes.
    """

    __slots__ = ("_abandoned", "_log", "attempt", "node_id", "run_id", "visit")

    def __init__(self, log: RunLog, node_id: str, attempt: int, visit: int) -> None:
        self.run_id = log.run_id
        self.node_id = node_id
        self.attempt = attempt
        self.visit = visit
        self._log = log
        self._abandoned = False

    @property
    def cancelled(self) -> bool:
        """Whether the runtime has abandoned this attempt. Safe to read from any thread."""
        return self._abandoned

    @property
    def pause_requested(self) -> bool:
        """Whether a pause of the run was asked for (from this process or another): the
        run pauses once this node returns, its outputs kept, so long work may wrap up
        early. Safe to read from any thread."""
        return self._log.state.pause_requested

    def abandon(self) -> None:
        """Fence this attempt: nothing it does from now on is recorded."""
        self._abandoned = True

    async def set_output(self, key: str, value: Any) -> None:
        """Record ``key = value`` in this node's output accumulator; waits for the commit.

        Raises :class:`MemoryValueError` (recording nothing) for a value the log cannot
        store unchanged, and :class:`NodeError` once the attempt is abandoned. A
        cancellation of the run is taken here.
        """
        task = asyncio.current_task()
        # A node that swallowed its cancellation still carries it (``cancelling()``).
        if self._abandoned or (task is not None and task.cancelling()):
            reason = f"attempt {self.attempt} was abandoned: it records nothing"
            raise NodeError(self.run_id, self.node_id, reason)
        check_memory_value(key, value)
        await self._log.append([OutputSet(node_id=self.node_id, key=key, value=value)])


class FunctionNodeActor(Actor):
    """Runs plain nodes (functions and routers) and tells the executor NodeDone.

    One such actor serves one lane of a run (the main path, or one branch of a fan-out):
    a lane runs one node at a time, so one mailbox per lane keeps branches concurrent
    without spawning an actor for every node.

    A node's callable receives one dict (the node's input keys read from memory, or all of
    memory when it declares none) and, if it takes a second parameter, a
    :class:`NodeContext`; it returns a mapping of outputs (or None). It may be async (run
    in a task of the attempt's own, which tells the executor how it ended) or a plain
    ``def`` (run in a worker thread, so it may block).
    Each attempt has a time limit (``NodeSpec.timeout``, else the runtime's
    ``node_timeout``): past it the attempt fails with :class:`NodeTimeoutError` (retried
    and routed like any failure) and a blocking thread is abandoned, as it is when the
    run is cancelled. A router without a callable returns no outputs: its outgoing edges
    decide on memory alone.

    Outputs are checked against ``output_keys``: an undeclared key, or a declared
    non-nullable key that is missing, is a failure (and so is retried by the executor).
    """

    __slots__ = (
        "attempt",
        "context",
        "deadline",
        "executor",
        "graph",
        "log",
        "node_timeout",
        "resolve",
        "specs",
    )

    def __init__(
        self,
        graph: GraphSpec,
        resolve: Callable[[NodeSpec], PlainFunction | None],
        executor: ActorRef,
        log: RunLog,
        *,
        node_timeout: float | None = None,
    ) -> None:
        self.graph = graph
        self.specs = graph.node_map()
        self.resolve = resolve
        self.executor = executor
        self.log = log
        self.node_timeout = node_timeout
        # One lazily armed timer for the lane's attempts, not a timed cancel scope (and a
        # timer into the loop's heap and out again) on every step.
        self.deadline = AttemptDeadline()
        self.attempt: Attempt | None = None  # the lane's attempt in flight, if any
        # What each attempt's task starts from (a copy of it): the context the lane was
        # made in, whichever task or callback hands it the attempt (the executor's, the
        # store's answer, the attempt before's), so no attempt sees what another set. Only
        # ever copied, never entered: a lane made where no variable is set shares one
        # empty context instead of holding its own.
        context = contextvars.copy_context()
        self.context = context if len(context) else _NO_VARIABLES

    async def receive(self, message: Any) -> Any:
        self.receive_now(message)

    def receive_now(self, message: Any) -> bool:
        # The attempt runs in a task of its own that tells the executor NodeDone itself:
        # this actor is free again at once, and a node that swallows its cancellation can
        # be abandoned (its task left behind) without holding the actor or the run. Handed
        # over synchronously (no wake-up of this actor's task) when it is idle.
        assert isinstance(message, ExecuteNode)
        spec = self.specs[message.node_id]
        plain = self.resolve(spec)
        if plain is None:  # a router without a callable: no outputs, nothing to await
            try:
                outputs = checked_outputs(spec, {})
            except Exception as exc:  # its output keys: reported, the executor retries it
                self._tell(message, None, exc)
            else:
                self._tell(message, outputs, None)
            return True
        context: NodeContext | None = None
        if plain.wants_context:
            context = NodeContext(self.log, message.node_id, message.attempt, message.visit)
        timeout = spec.timeout if spec.timeout is not None else self.node_timeout
        attempt = self.attempt = Attempt(spec, message, context, timeout)
        attempt.task = asyncio.get_running_loop().create_task(
            self._run(attempt, plain), context=self.context.copy()
        )
        return True

    def stop_waits(self) -> bool:
        # Only an attempt in flight gives on_stop anything to do.
        attempt = self.attempt
        return not (
            attempt is None or attempt.task is None or attempt.task.done() or attempt.abandoned
        )

    async def on_stop(self) -> None:
        """The lane stops (the run is cancelled or paused, or the runtime closes): the
        attempt in flight is cancelled and given ABANDON_GRACE seconds to unwind (its
        partial outputs are recorded by then), else abandoned."""
        attempt = self.attempt
        if attempt is None or attempt.task is None or attempt.task.done() or attempt.abandoned:
            return
        attempt.stopped = True
        self._drains(attempt)  # before its run's result is delivered
        attempt.task.cancel()
        with anyio.move_on_after(ABANDON_GRACE):
            await asyncio.wait({attempt.task})
        if not attempt.task.done():
            self._abandon(attempt)

    def on_stopped(self) -> None:
        self.deadline.close()

    async def _run(self, attempt: Attempt, plain: PlainFunction) -> None:
        """The attempt's task: the callable, its deadline, its outputs checked, NodeDone."""
        spec, message, context = attempt.spec, attempt.message, attempt.context
        deadline = self.deadline if attempt.timeout is not None else None
        try:
            if message.attempt > 1 and self.log.run_hooks is not None:
                await self._after_abandoned(message, attempt.timeout)  # before its deadline
            try:
                if deadline is not None:
                    assert attempt.timeout is not None
                    deadline.start(attempt.timeout, self, attempt.task)
                try:
                    result = await call_node(plain, message, context, self.log)
                finally:
                    if deadline is not None:
                        deadline.stop()
            except asyncio.CancelledError:
                if context is not None:
                    context.abandon()
                if deadline is None or not deadline.expired or attempt.stopped:
                    return  # stopped with its lane: nothing to tell
                deadline.take_back()
                raise NodeTimeoutError(spec.id, deadline.limit) from None
            if deadline is not None and deadline.expired:
                # The callable caught the cancellation and returned: it is still past
                # its limit.
                if context is not None:
                    context.abandon()
                deadline.take_back()
                raise NodeTimeoutError(spec.id, deadline.limit)
            outputs = checked_outputs(spec, result)
        except Exception as exc:  # reported to the executor, which records and retries it
            if attempt.stopped or attempt.abandoned:
                return
            self._tell(message, None, exc)
        else:
            if attempt.stopped or attempt.abandoned:
                return
            self._tell(message, outputs, None)

    def attempt_expired(self) -> None:
        """The deadline cancelled the attempt's task: abandon it if it has not ended
        ABANDON_GRACE seconds later (it swallows its cancellation)."""
        attempt = self.attempt
        if attempt is not None and attempt.task is not None:
            asyncio.get_running_loop().call_later(ABANDON_GRACE, self._overdue, attempt)

    def _overdue(self, attempt: Attempt) -> None:
        if attempt.task is None or attempt.task.done() or attempt.stopped or attempt.abandoned:
            return
        self._abandon(attempt)
        error = NodeTimeoutError(attempt.spec.id, attempt.timeout or 0.0)
        self._tell(attempt.message, None, error)

    def _drains(self, attempt: Attempt) -> None:
        """Count the attempt's task as running (the run draining) until it ends, as a
        plain def's thread is: an async node that swallows its cancellation runs on."""
        hooks, task = self.log.run_hooks, attempt.task
        if hooks is not None and task is not None and not attempt.drains:
            attempt.drains = True
            end = hooks.drain(attempt.spec.id)
            task.add_done_callback(lambda _task: end())

    def _abandon(self, attempt: Attempt) -> None:
        attempt.abandoned = True
        self._drains(attempt)
        if attempt.context is not None:
            attempt.context.abandon()
        assert attempt.task is not None
        attempt.task.add_done_callback(_drop_result)
        _log.warning(
            "node %r did not stop within %g s of its cancellation (it catches "
            "CancelledError): abandoned, it records nothing more",
            attempt.spec.id,
            ABANDON_GRACE,
        )

    def _done(
        self,
        message: ExecuteNode,
        outputs: dict[str, Any] | None,
        error: BaseException | None,
    ) -> NodeDone:
        if error is not None:
            return NodeDone(
                node_id=message.node_id,
                attempt=message.attempt,
                branch=message.branch,
                success=False,
                error=str(error) or type(error).__name__,
                error_type=type(error).__name__,
            )
        return NodeDone(
            node_id=message.node_id,
            attempt=message.attempt,
            branch=message.branch,
            success=True,
            outputs=outputs or {},
        )

    def _tell(
        self, message: ExecuteNode, outputs: dict[str, Any] | None, error: BaseException | None
    ) -> None:
        """Tell the executor how the attempt ended, without awaiting (a full mailbox gets
        it from a task of the actor system's)."""
        done = self._done(message, outputs, error)
        try:
            self.executor.tell_nowait(done)  # no coroutine on every step's path
        except MailboxFullError:
            self.system.start_task(_tell_later, self.executor, done)

    async def _after_abandoned(self, message: ExecuteNode, limit: float | None) -> None:
        """A retry starts once the attempt before, if it was abandoned at its deadline and
        its thread runs on, has ended, waiting at most the node's time limit (NodeError if
        it has not), so two attempts of a node never run at once."""
        assert self.log.run_hooks is not None
        if not await self.log.run_hooks.drained(message.node_id, limit):
            reason = f"attempt {message.attempt - 1} still runs (abandoned, its thread goes on)"
            raise NodeError(self.log.run_id, message.node_id, reason)


class Attempt:
    """One attempt of a plain node in its lane: what it runs and how it ended."""

    __slots__ = ("abandoned", "context", "drains", "message", "spec", "stopped", "task", "timeout")

    def __init__(
        self,
        spec: NodeSpec,
        message: ExecuteNode,
        context: NodeContext | None,
        timeout: float | None,
    ) -> None:
        self.spec = spec
        self.message = message
        self.context = context
        self.timeout = timeout
        self.task: asyncio.Task[None] | None = None
        self.stopped = False  # its lane stopped: it tells nothing
        self.abandoned = False  # it outlived its grace: it tells and records nothing more
        self.drains = False  # its task counts in its run's draining (control/_draining.py)


async def _tell_later(executor: ActorRef, done: NodeDone) -> None:
    try:
        await executor.tell(done)  # waits for room
    except ActorStoppedError:
        pass  # the run ended meanwhile: nobody is left to tell


def _drop_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned node's end is nobody's error
