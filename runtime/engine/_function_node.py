"""Plain nodes: a Python callable (function node) or a pass-through (router)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable
from types import CoroutineType
from typing import Any, Final

import anyio

from actors import Actor, ActorRef, ActorStoppedError, MailboxFullError

from .._errors import NodeError, NodeTimeoutError
from ..control._own_run import NODE_OF_RUN
from ..control._threads import own_failure
from ..events._catalogue import OutputSet
from ..events._values import check_memory_value
from ..spec._model import GraphSpec, NodeSpec
from ._messages import ExecuteNode, NodeDone
from ._node_call import PlainFunction, call_node, checked_outputs
from ._runlog import RunLog

__all__ = ["ABANDON_GRACE", "FunctionNodeActor", "NodeContext", "PlainFunction"]

#: The context every lane's deadline timer runs in: one empty context, not a copy of the
#: arming task's per timer (``call_at``'s default). The timer reads and sets no variable.
_TIMER_CONTEXT = contextvars.Context()

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

    The lane's attempt in flight (or its last) is fields of the lane, not an object of its
    own: its task, its message, its NodeContext, whether it was abandoned and whether its
    task counts in the run's draining. An attempt another replaced (abandoned, its task
    running on) knows it is no longer the lane's by its message (``self.message is not
    message``) and tells and records nothing more. So is its time limit (see
    :meth:`__call__`): one lazily armed timer for the lane's attempts, not a timed cancel
    scope (a timer into the loop's heap and out again) on every step.
    """

    __slots__ = (
        "_armed_at",
        "_deadline",
        "_handle",
        "abandoned",
        "context",
        "drains",
        "executor",
        "expired",
        "graph",
        "limit",
        "log",
        "message",
        "node_context",
        "node_timeout",
        "resolve",
        "specs",
        "stopped",
        "task",
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
        # The lane's attempt in flight, or its last (see the class docstring).
        self.task: asyncio.Task[None] | None = None
        self.message: ExecuteNode | None = None
        self.node_context: NodeContext | None = None
        self.abandoned = False  # it outlived its grace: it tells and records nothing more
        self.drains = False  # its task counts in its run's draining (control/_draining.py)
        self.stopped = False  # the lane stopped: its attempt tells nothing
        # The attempt's deadline (None: none, or no attempt runs), the lane's timer and
        # the instant it is armed for; whether the attempt passed its deadline (its task
        # was cancelled for it) and its time limit in seconds.
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self.expired = False
        self.limit = 0.0
        # What each attempt's task starts from (a copy of it): the context the lane was
        # made in, whichever task or callback hands it the attempt (the executor's, the
        # store's answer, the attempt before's), so no attempt sees what another set; with
        # the lane's run as NODE_OF_RUN, so a node awaiting its own run's end is refused
        # (set here once, not an attempt). Only ever copied, never entered.
        self.context = contextvars.copy_context()
        self.context.run(NODE_OF_RUN.set, log.run_id)

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
        self.message, self.node_context = message, context
        self.abandoned = self.drains = False
        self.task = asyncio.get_running_loop().create_task(
            self._run(message, spec, plain, context, timeout), context=self.context.copy()
        )
        return True

    def stop_waits(self) -> bool:
        # Only an attempt in flight gives on_stop anything to do.
        task = self.task
        return not (task is None or task.done() or self.abandoned)

    async def on_stop(self) -> None:
        """The lane stops (the run is cancelled or paused, or the runtime closes): the
        attempt in flight is cancelled and given ABANDON_GRACE seconds to unwind (its
        partial outputs are recorded by then), else abandoned."""
        task = self.task
        if task is None or task.done() or self.abandoned:
            return
        self.stopped = True
        self._drains()  # before its run's result is delivered
        task.cancel()
        with anyio.move_on_after(ABANDON_GRACE):
            await asyncio.wait({task})
        if not task.done():
            self._abandon()

    def on_stopped(self) -> None:
        # No more attempts: disarm the timer (it would keep this actor alive).
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    async def _run(
        self,
        message: ExecuteNode,
        spec: NodeSpec,
        plain: PlainFunction,
        context: NodeContext | None,
        timeout: float | None,
    ) -> None:
        """The attempt's task: the callable, its deadline, its outputs checked, NodeDone."""
        try:
            if message.attempt > 1 and self.log.run_hooks is not None:
                await self._after_abandoned(message, timeout)  # before its deadline
            try:
                if timeout is not None:
                    # Its deadline, recorded; the lane's timer is armed only when none is
                    # armed for an instant at or before it (see __call__).
                    self.limit = timeout
                    self.expired = False
                    loop = asyncio.get_running_loop()
                    deadline = self._deadline = loop.time() + timeout
                    if self._handle is None or self._armed_at > deadline:
                        self._arm(loop, deadline)
                try:
                    if plain.is_async and context is None:  # call_node's, inline: most nodes
                        result = plain.function(message.inputs)
                        if type(result) is CoroutineType or inspect.isawaitable(result):
                            result = await result
                    else:
                        result = await call_node(plain, message, context, self.log)
                finally:
                    if timeout is not None and self.message is message:
                        self._deadline = None  # the timer stays armed for the next attempt
            except asyncio.CancelledError as exc:
                if (stray := own_failure(exc)) is not None and not self.stopped:
                    raise stray from exc  # the node's own code let it out: its failure
                if context is not None:
                    context.abandon()
                expired = self.expired and self.message is message  # (not if replaced)
                if timeout is None or self.stopped or not expired:
                    return  # stopped with its lane: nothing to tell
                _take_back()
                raise NodeTimeoutError(spec.id, timeout) from None
            except BaseException as exc:  # sys.exit() in the node: its failure, not the process's
                if isinstance(exc, Exception) or (failure := own_failure(exc)) is None:
                    raise  # an error (reported below), Ctrl-C, or the coroutine closed
                raise failure from exc
            if timeout is not None and self.expired and self.message is message:
                # The callable caught the cancellation and returned: it is still past
                # its limit.
                if context is not None:
                    context.abandon()
                _take_back()
                raise NodeTimeoutError(spec.id, timeout)
            outputs = checked_outputs(spec, result)
        except Exception as exc:  # reported to the executor, which records and retries it
            if self.stopped or self.abandoned or self.message is not message:
                return
            self._tell(message, None, exc)
        else:
            if self.stopped or self.abandoned or self.message is not message:
                return
            self._tell(message, outputs, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Arm the lane's timer for ``deadline`` (instead of the one armed, if any)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_at(deadline, self, context=_TIMER_CONTEXT)
        self._armed_at = deadline

    def __call__(self) -> None:
        """The lane's timer fired (this actor is its callback: no bound method per lane).
        Past the attempt's deadline it cancels the attempt's task, which tells that
        cancellation from any other by :attr:`expired` and takes it back
        (``Task.uncancel``), as ``asyncio.timeout`` does; and abandons the attempt if it has
        not ended ABANDON_GRACE seconds later (it swallows its cancellation). Fired early
        (the attempt it was armed for ended), it moves on to the current attempt's
        deadline, if any."""
        self._handle = None
        deadline, task = self._deadline, self.task
        if deadline is None or task is None:
            return  # no attempt running: the next one arms the timer again
        loop = asyncio.get_running_loop()
        if deadline <= self._armed_at:  # the timer was armed for this deadline or later
            self.expired = True
            task.cancel()
            loop.call_later(ABANDON_GRACE, self._overdue, task)
        else:  # armed for an attempt that ended: on to this one's
            self._arm(loop, deadline)

    def _overdue(self, task: asyncio.Task[None]) -> None:
        if task is not self.task or task.done() or self.stopped or self.abandoned:
            return
        self._abandon()
        assert self.message is not None
        self._tell(self.message, None, NodeTimeoutError(self.message.node_id, self.limit))

    def _drains(self) -> None:
        """Count the attempt's task as running (the run draining) until it ends, as a
        plain def's thread is: an async node that swallows its cancellation runs on."""
        hooks, task, message = self.log.run_hooks, self.task, self.message
        if hooks is not None and task is not None and message is not None and not self.drains:
            self.drains = True
            end = hooks.drain(message.node_id)
            task.add_done_callback(lambda _task: end())

    def _abandon(self) -> None:
        self.abandoned = True
        self._drains()
        if self.node_context is not None:
            self.node_context.abandon()
        assert self.task is not None and self.message is not None
        self.task.add_done_callback(_drop_result)
        _log.warning(
            "node %r did not stop within %g s of its cancellation (it catches "
            "CancelledError): abandoned, it records nothing more",
            self.message.node_id,
            ABANDON_GRACE,
        )

    def _done(
        self,
        message: ExecuteNode,
        outputs: dict[str, Any] | None,
        error: BaseException | None,
    ) -> NodeDone:
        if error is not None:
            return message.failed(str(error) or type(error).__name__, type(error).__name__)
        return message.succeeded(outputs or {})

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
        except ActorStoppedError:
            pass  # the run's executor stopped first (its run lost or handed back): nobody to tell

    async def _after_abandoned(self, message: ExecuteNode, limit: float | None) -> None:
        """A retry starts once the attempt before, if it was abandoned at its deadline and
        its thread runs on, has ended, waiting at most the node's time limit (NodeError if
        it has not), so two attempts of a node never run at once."""
        assert self.log.run_hooks is not None
        if not await self.log.run_hooks.drained(message.node_id, limit):
            reason = f"attempt {message.attempt - 1} still runs (abandoned, its thread goes on)"
            raise NodeError(self.log.run_id, message.node_id, reason)


def _take_back() -> None:
    """Undo the cancellation the deadline requested (the attempt caught it)."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def _tell_later(executor: ActorRef, done: NodeDone) -> None:
    try:
        await executor.tell(done)  # waits for room
    except ActorStoppedError:
        pass  # the run ended meanwhile: nobody is left to tell


def _drop_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned node's end is nobody's error
