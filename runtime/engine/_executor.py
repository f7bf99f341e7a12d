"""The executor: one actor per run that walks the graph and writes every fact to the log.

The executor never waits on a node: it tells a node actor ``ExecuteNode`` and goes back
to its mailbox; the node tells ``NodeDone`` when it finishes. So pause, cancel and input
messages are handled while nodes run, branches of a fan-out run concurrently, and two
branches that finish "in the same tick" are still handled one after the other. Nor does
it wait on a model: the choice of an llm_decide edge and the scoring of the goal run in
tasks of their own and answer with a message (``EdgeDecided``, ``GoalScored``).

State: the executor keeps no run state of its own. It records an event (the run log
applies it to the run's live :class:`RunState` at once) and decides from that state, so
what it decides from is exactly the fold of what it wrote. A resume folds the stored log
and continues with that state object.

Durability: events are staged and committed as one batch at each node start, so a step
is one append and one commit (the previous node's completion, its memory writes, the edge
taken and the next node's start). A crash re-runs only the node that had started and not
completed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from actors import Actor, ActorRef, ActorStoppedError, MailboxFullError, Terminated
from eventstore import EventBody

from .._errors import ExpressionError
from .._result import RunOutcome
from ..events._catalogue import (
    EdgeTaken,
    InputInjected,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    PauseReason,
    RunFinished,
    RunResumed,
    RunStarted,
)
from ..events._memory import disown, disown_values
from ..events._state import RunState
from ..llm._goals import GoalScorer
from ..providers._base import LlmProvider
from ..spec._model import (
    GraphSpec,
    NodeSpec,
    graph_hash,
    retry_delay,
    shared_graph_dict,
)
from ._edges import Route, decide_edge, failure_routes, resolve_edges
from ._executor_edges import EdgeSteps
from ._executor_end import RunEnding
from ._fanout import FanOut, resumed_fanout
from ._messages import (
    CancelRun,
    CommitFailed,
    EdgeDecided,
    ExecuteNode,
    GoalScored,
    InjectInput,
    NodeDone,
    PauseRun,
    RetryNode,
    StartRun,
)
from ._runlog import RunLog

__all__ = ["ExecutorActor", "NodeFactory"]

#: Builds a node actor of one run: (graph, spec, executor ref, run log) -> actor. Plain
#: nodes (function, router) share one actor per lane (main path or branch), built from the
#: lane's first node; every other kind gets an actor of its own.
NodeFactory = Callable[[GraphSpec, NodeSpec, ActorRef, RunLog], Actor]
PLAIN_KINDS = ("function", "router")
_MAIN_LANE = "lane:None"  # the actor key of the main path's plain nodes


class _StartOnCommit:
    """The store's answer to a node start's batch (on the loop, outside any task): the
    node runs once its start is committed; a failed commit goes to the executor. One
    object per step, not a partial and a bound method (fewer objects for the cyclic GC).
    """

    __slots__ = ("executor", "message", "ref")

    def __init__(self, executor: ExecutorActor, ref: ActorRef, message: ExecuteNode) -> None:
        self.executor = executor
        self.ref = ref
        self.message = message

    def __call__(self, result: Any, error: BaseException | None) -> None:
        target, note = (
            (self.ref, self.message)
            if error is None
            else (self.executor.ref, CommitFailed(error=error))
        )
        try:
            target.tell_nowait(note)
        except ActorStoppedError:
            pass  # the run (or the node's lane) stopped meanwhile: nothing is to run
        except MailboxFullError:  # a full executor mailbox: deliver it from a task
            self.executor.system.tell_later(target, note, 0)


class ExecutorActor(EdgeSteps, RunEnding, Actor):
    """Walks one run of a graph. See the module docstring for the protocol."""

    def __init__(
        self,
        *,
        run_id: str,
        graph: GraphSpec,
        log: RunLog,
        node_factory: NodeFactory,
        provider: LlmProvider | None,
        outcome: RunOutcome,
        input: dict[str, Any] | None = None,
        resume_from: RunState | None = None,
        resume_input: dict[str, Any] | None = None,
        score_goal: GoalScorer | None = None,
    ) -> None:
        self.score_goal = score_goal
        self.run_id = run_id
        self.graph = graph
        self.log = log
        self.node_factory = node_factory
        self.provider = provider
        self.outcome = outcome
        self.input = dict(input or {})
        if resume_from is not None:
            log.state = resume_from  # continue with the fold of the stored log
        self.resuming = resume_from is not None
        self.state: RunState = log.state
        self.resume_input = resume_input
        self.reducers = {key.name: key.reducer for key in graph.memory}
        self.specs = graph.node_map()
        self.pause_nodes = frozenset(graph.pause_nodes)
        self.terminal_nodes = frozenset(graph.terminal_nodes)
        self.sync = graph.durability == "sync"
        self.nodes: dict[str, ActorRef] = {}  # actor key (lane or node) -> actor
        self.node_refs: dict[str, ActorRef] = {}  # node id -> the actor that runs it
        self.running: dict[str, tuple[int, str | None]] = {}  # node -> (attempt, branch)
        self.retry_timers = 0
        self.deferred: list[tuple[str, str | None, PauseReason]] = []  # (node, branch, why)
        self.pass_pause: set[str] = set()
        self.fanout: FanOut | None = None
        self.pause_requested = False
        # node -> the scope of the model call choosing its llm_decide edge; the node counts
        # as running (nothing of it is recorded) until the answer arrives.
        self.deciding: dict[str, anyio.CancelScope] = {}
        self.stopping = False
        self.scoring: anyio.CancelScope | None = None
        self.ending: RunFinished | None = None

    # ------------------------------------------------------------------ messages

    async def receive(self, message: Any) -> Any:
        if self.stopping and not (
            self.scoring is not None and isinstance(message, GoalScored | CancelRun)
        ):
            # Late messages after the run stopped (a NodeDone in flight, ...), or while
            # its goal is scored: only the score and a cancel matter then.
            return None
        try:
            if isinstance(message, NodeDone):  # the step message: one coroutine fewer
                await self._on_node_done(message)
            else:
                await self._dispatch(message)
            if self.deferred and not self.stopping:
                # A node held at a pause point pauses the run once nothing else runs,
                # whichever message left nothing running (a branch that failed, ...).
                await self._maybe_pause()
        except Exception as exc:
            if not await self._fail_run(exc):
                self.outcome.fail(exc)
                raise
        if self.stopping:
            self._stop_nodes()
            if self.scoring is None:
                self.stop_self()
        return None

    async def _dispatch(self, message: Any) -> None:
        match message:
            case RetryNode():
                self.retry_timers -= 1
                await self._start_node(message.node_id, message.branch, attempt=message.attempt)
            case StartRun():
                await self._on_start()
            case PauseRun():
                self.pause_requested = True
                await self._maybe_pause()
            case EdgeDecided():
                await self._on_edge_decided(message)
            case GoalScored():
                await self._on_goal_scored(message)
            case CancelRun():
                await self._cancel(message.reason)
            case Terminated():
                await self._on_node_terminated(message)
            case CommitFailed():
                raise message.error
            case InjectInput():
                self.emit(InputInjected(data=dict(message.data)))
                await self.commit()
            case _:
                raise TypeError(f"executor got an unknown message {type(message).__name__}")

    # ------------------------------------------------------------------ log

    def emit(self, body: EventBody) -> None:
        """Record ``body``: staged for this step's commit and applied to the state now."""
        self.log.stage(body)

    def _emit_edge(self, source: str, route: Route) -> None:
        self.log.stage(
            EdgeTaken(
                source=source,
                target=route.target,
                edge_index=route.index,
                condition=route.condition,
                reason=route.reason,
                judge_error=route.judge_error,
            )
        )

    async def commit(self, *, boundary: bool = True) -> None:
        """Commit the staged events as one batch.

        With durability "sync" every commit waits for the store. With "async", node
        boundaries are written behind (left queued in the run log, committed with the next
        durable append); pauses, cancellation and the end of the run always wait.
        """
        if not self.log.pending:
            return
        # Unshielded, as in _start_node: only the actor system's exit cancels an executor.
        await self.log.append((), durable=self.sync or not boundary, shield=False)

    # ------------------------------------------------------------------ start / resume

    async def _on_start(self) -> None:
        state = self.state
        if not self.resuming:
            self.emit(
                RunStarted(
                    graph=shared_graph_dict(self.graph),
                    graph_hash=graph_hash(self.graph),
                    entry=self.graph.entry_node,
                    goal=None if self.graph.goal is None else msgspec.to_builtins(self.graph.goal),
                    input=dict(self.input),
                )
            )
            await self._start_node(self.graph.entry_node, None)
            return
        pending = list(state.pending)
        # Nodes that started and did not finish run again, as the same visit.
        unfinished = set(state.running)
        gates_due = state.gates_due  # read before RunResumed clears it
        self.emit(RunResumed())
        if self.resume_input:
            self.emit(InputInjected(data=dict(self.resume_input)))
        # A resume answers the run's pause (or continues from its cancel's resume point, or
        # after a crash): the nodes due run now without pausing again. A fork from the
        # middle of a run passes only the nodes that had started, so a node that had not
        # reached its pause gate meets it now: a fork never skips an approval.
        self.pass_pause = unfinished if gates_due else set(pending)
        if state.fanout is not None:
            self.fanout = resumed_fanout(state.fanout, self.graph.conflict_strategy)
        if self.fanout is not None and self.fanout.join in pending:
            pending.remove(self.fanout.join)  # a finished branch's edge; the join waits
        starts: list[tuple[str, str | None]] = []
        for node in pending:
            branch = None
            if self.fanout is not None:
                branch = self.fanout.node_branch.get(node, node)
            starts.append((node, branch))
        if self.fanout is not None:
            live = {branch for _, branch in starts}
            for branch, status in self.fanout.branches.items():
                if status == "running" and branch not in live:
                    self.fanout.branches[branch] = "done"  # it ended without reaching the join
        for node, branch in starts:
            await self._start_node(node, branch, rerun=node in unfinished)
        if self.fanout is not None:
            await self._maybe_join(self.fanout)
        elif not starts:
            await self._finish("completed", None)

    # ------------------------------------------------------------------ nodes

    async def _start_node(
        self, node_id: str, branch: str | None, *, attempt: int = 1, rerun: bool = False
    ) -> None:
        if self.stopping:
            return
        if attempt == 1 and node_id not in self.pass_pause:
            if self.pause_requested:
                self.deferred.append((node_id, branch, "user"))
            elif node_id in self.pause_nodes:
                self.deferred.append((node_id, branch, "hitl"))
            if self.deferred and self.deferred[-1][0] == node_id:
                await self._maybe_pause()
                return
        self.pass_pause.discard(node_id)
        if node_id in self.running and branch is not None and self.fanout is not None:
            other = self.running[node_id][1]
            await self._branch_failed(
                self.fanout, branch, f"node {node_id!r} is already running in branch {other!r}"
            )
            return
        state = self.state
        visit = state.visit_counts.get(node_id, 0)
        if attempt == 1 and not rerun:
            if state.steps >= self.graph.max_steps:
                await self._finish(
                    "failed", f"max_steps ({self.graph.max_steps}) reached before {node_id!r}"
                )
                return
            visit += 1
        started = NodeStarted(node_id=node_id, visit=visit or 1, attempt=attempt, branch=branch)
        spec = self.specs[node_id]
        memory = state.memory
        if spec.input_keys:
            inputs = {k: memory[k] for k in spec.input_keys if k in memory}
        else:
            inputs = dict(memory)
        if branch is not None:
            # Branches run side by side: a list handed to one must not grow in place when
            # another branch appends to its key.
            disown(state, inputs)
        self.running[node_id] = (attempt, branch)
        if spec.kind not in PLAIN_KINDS:
            key = f"node:{node_id}"
        else:
            key = _MAIN_LANE if branch is None else f"lane:{branch}"
        ref = self.nodes.get(key)
        if ref is None or ref.stopped:
            actor = self.node_factory(self.graph, spec, self.ref, self.log)
            ref = self.system.spawn(actor, watcher=self.ref)
            self.nodes[key] = ref
        self.node_refs[node_id] = ref
        message = ExecuteNode(
            node_id=node_id, attempt=attempt, visit=started.visit, branch=branch, inputs=inputs
        )
        # The node starts once this step's events are committed. Durably, the store's
        # answer tells the node itself (_StartOnCommit): the executor goes back to its mailbox
        # at once instead of waiting to be woken by the commit, on every step's path.
        if self.sync and self.log.submit((started,), _StartOnCommit(self, ref, message)):
            return
        # Unshielded: only the actor system's exit cancels an executor (RunLog.append).
        # A new run's first step is durable whatever the graph's durability: Runtime.start
        # returns once the run is in the store.
        await self.log.append((started,), durable=self.sync or self.log.last_seq == 0, shield=False)
        await ref.tell(message)

    async def _on_node_done(self, done: NodeDone) -> None:
        running = self.running.get(done.node_id)
        if running is None or running[0] != done.attempt:
            return  # a stale answer (the attempt was cancelled)
        del self.running[done.node_id]
        if done.needs_input:
            # The node asked for user input: pause with the node itself as the resume
            # point (it started and did not complete, so a resume runs it again).
            self.deferred.insert(0, (done.node_id, done.branch, "input"))
            await self._maybe_pause()
            return
        routes: list[Route] | None = None
        resolved = False
        if done.success:
            try:  # before anything is written: a name missing at run time fails the node
                routes = resolve_edges(
                    self.graph,
                    done.node_id,
                    success=True,
                    memory=self.state.memory,
                    outputs=done.outputs,
                )
                resolved = True
            except ExpressionError as exc:
                done = NodeDone(
                    node_id=done.node_id,
                    attempt=done.attempt,
                    branch=done.branch,
                    success=False,
                    error=str(exc),
                    error_type="ExpressionError",
                    retryable=False,
                )
        if resolved and routes is None:
            # llm_decide edges: a model chooses, in a task of its own. Nothing of the node's
            # end is recorded until it answers; meanwhile the node counts as running, so a
            # cancel records it as the resume point and a resume asks again.
            self.running[done.node_id] = running
            self._ask_model(done)
            return
        await self._node_finished(done, routes)

    def _ask_model(self, done: NodeDone) -> None:
        scope = anyio.CancelScope()
        self.deciding[done.node_id] = scope
        self.system.start_task(self._decide, done, scope)

    async def _decide(self, done: NodeDone, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                route = await decide_edge(self.graph, done.node_id, done.outputs, self.provider)
            except Exception as exc:  # handed to the executor, which fails the run with it
                answer = EdgeDecided(done=done, error=exc)
            else:
                answer = EdgeDecided(done=done, route=route)
            try:
                await self.ref.tell(answer)
            except ActorStoppedError:
                pass  # the run stopped meanwhile: the answer has no one to go to

    async def _on_edge_decided(self, message: EdgeDecided) -> None:
        done = message.done
        self.deciding.pop(done.node_id, None)
        running = self.running.get(done.node_id)
        if running is None or running[0] != done.attempt:
            return  # the run was cancelled meanwhile
        if message.error is not None:
            raise message.error
        del self.running[done.node_id]
        await self._node_finished(done, [message.route])

    async def _node_finished(self, done: NodeDone, routes: list[Route] | None) -> None:
        """Record a finished node and follow its edges: ``routes``, resolved (an llm_decide
        choice made) for a success; a failure, one found here too (a memory conflict),
        takes its on_failure and always edges, which no model chooses."""
        if done.success:
            conflict = self._write_outputs(done)
            if conflict is not None:
                done = NodeDone(
                    node_id=done.node_id,
                    attempt=done.attempt,
                    branch=done.branch,
                    success=False,
                    error=conflict,
                    error_type="MemoryConflictError",
                    retryable=False,
                )
            else:
                self.emit(NodeCompleted(node_id=done.node_id, branch=done.branch))
        if not done.success:
            spec = self.specs[done.node_id]
            policy = spec.retry or self.graph.retry
            will_retry = (
                done.retryable and spec.kind != "llm" and done.attempt < policy.max_attempts
            )
            self.emit(
                NodeFailed(
                    node_id=done.node_id,
                    error=done.error or "",
                    attempt=done.attempt,
                    error_type=done.error_type or "Error",
                    will_retry=will_retry,
                    branch=done.branch,
                )
            )
            if will_retry:
                await self.commit()
                self.retry_timers += 1
                self.system.tell_later(
                    self.ref,
                    RetryNode(node_id=done.node_id, attempt=done.attempt + 1, branch=done.branch),
                    retry_delay(policy, done.attempt),
                )
                return
            routes = failure_routes(self.graph, done.node_id)
        assert routes is not None  # a success comes with its resolved routes
        if (
            len(routes) == 1
            and (done.branch is None or self.fanout is None)
            and not (done.success and done.node_id in self.terminal_nodes)
        ):
            # The common step, what _advance would do, inline (one coroutine fewer).
            self._emit_edge(done.node_id, routes[0])
            await self._start_node(routes[0].target, None)
            return
        await self._advance(done, routes)

    async def _on_node_terminated(self, note: Terminated) -> None:
        """A node actor died outside its own error handling: its attempt failed for good."""
        if note.error is None:
            return  # we stopped it ourselves
        for node_id, ref in self.node_refs.items():
            if ref.name == note.actor and node_id in self.running:
                attempt, branch = self.running[node_id]
                await self._on_node_done(
                    NodeDone(
                        node_id=node_id,
                        attempt=attempt,
                        branch=branch,
                        success=False,
                        error=f"node actor crashed: {note.error}",
                        error_type="NodeCrashed",
                        retryable=False,
                    )
                )
                return

    def _write_outputs(self, done: NodeDone) -> str | None:
        """Emit the memory writes of a successful node; return an error on a conflict."""
        fan = self.fanout if done.branch is not None else None
        # A returned list may be one the state grows in place (the node got it as input).
        disown_values(self.state, done.outputs.values())
        for key, value in done.outputs.items():
            if fan is not None and done.branch is not None:
                first = fan.writes.setdefault(key, done.branch)
                strategy = self.graph.conflict_strategy
                if first != done.branch and strategy == "error":
                    return (
                        f"memory key {key!r} written by branch {first!r} and by "
                        f"branch {done.branch!r}"
                    )
                if fan.claims.get(key, done.branch) != done.branch:
                    continue  # first_wins: a branch that wrote it has finished first
                fan.last_writer[key] = done.branch
                fan.values.setdefault(done.branch, {})[key] = (value, done.node_id)
            op = self.reducers.get(key, "replace")
            self.emit(
                MemoryWritten(key=key, value=value, op=op, node_id=done.node_id, branch=done.branch)
            )
        return None

    def on_stopped(self) -> None:
        # Stopped from outside too (the runtime stops a run whose claim was lost): its
        # nodes and its goal's scoring stop with it.
        self._stop_nodes()
        self._stop_scoring()
        if not self.outcome.done:
            self.outcome.fail(RuntimeError(f"executor of run {self.run_id} stopped early"))
