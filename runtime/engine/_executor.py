"""The executor: one actor per run that walks the graph and writes every fact to the log.

The executor never waits on a node: it tells a node actor ``ExecuteNode`` and goes back
to its mailbox; the node tells ``NodeDone`` when it finishes. So pause, cancel and input
messages are handled while nodes run, branches of a fan-out run concurrently, and two
branches that finish "in the same tick" are still handled one after the other. Nor does
it wait on a model: the choice of an llm_decide edge and the scoring of the goal run in
tasks of their own and answer with a message (``EdgeDecided``, ``GoalScored``).

State: the executor keeps no run state of its own. It records an event (the run log
applies it to the run's live :class:`RunState` at once) and decides from that state, the
fold of what it wrote. A resume folds the stored log and continues with that state object.

Durability: events are staged and committed as one batch at each node start, so a step
is one append and one commit (the previous node's completion, its memory writes, the edge
taken and the next node's start). A crash re-runs only the node started and not completed.

Collaborators, each with its own state: the node actors, the pause points, the open
fan-out and a node's output writes (FanOutJoin), a model's edge choices, the end (RunEnding).
"""

from __future__ import annotations

from typing import Any

from actors import Actor, Terminated
from eventstore import EventBody

from .._errors import ExpressionError
from .._result import RunOutcome
from ..events._catalogue import (
    NodeCompleted,
    RunCancelled,
    RunPaused,
)
from ..events._state import RunState
from ..llm._goals import GoalScorer
from ..providers._base import LlmProvider
from ..spec._model import GraphSpec, NodeSpec, memory_reducers
from ._choices import EdgeChoices
from ._edges import Route, edge_failure, edge_taken, failure_routes, resolve_edges
from ._ending import RunEnding
from ._failures import dead_end, node_failed, out_of_steps, rejection
from ._intake import record_next
from ._join import EndRun, FanOutJoin, JoinOutcome, StartNode, StopBranches
from ._messages import (
    CancelRun,
    CommitFailed,
    EdgeDecided,
    EndStaged,
    GoalScored,
    InjectInput,
    NodeDone,
    NodeHeld,
    PauseRun,
    RetryNode,
    StartRun,
    StartStaged,
)
from ._node_actors import NodeFactory
from ._pause_points import PausePoints
from ._resume_walk import resume_walk
from ._runlog import RunLog
from ._start_now import run_started, start_now
from ._start_on_commit import StartOnCommit
from ._step_now import StepNow

__all__ = ["ExecutorActor"]


def _lookups(
    graph: GraphSpec,
) -> tuple[dict[str, str], dict[str, NodeSpec], frozenset[str], frozenset[str]]:
    """What every run of ``graph`` reads from it (for GraphSpec.derived)."""
    return memory_reducers(graph), graph.node_map(), graph.terminal_set(), graph.pause_set()


class ExecutorActor(Actor):
    """Walks one run of a graph. See the module docstring for the protocol."""

    choices: EdgeChoices | None

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
        self.run_id = run_id
        self.graph = graph
        self.log = log
        self.outcome = outcome
        self.input = input if input is not None else {}  # the launcher's own copy
        if resume_from is not None:
            log.state = resume_from  # continue with the fold of the stored log
        self.resuming = resume_from is not None
        self.state: RunState = log.state
        self.resume_input = resume_input
        # Shared by the graph's runs: one lookup a run, not four.
        self.reducers, self.specs, self.terminal_nodes, pause_nodes = graph.derived(_lookups)
        self.sync = graph.durability == "sync"
        self.running: dict[str, tuple[int, str | None]] = {}  # node -> (attempt, branch)
        self.retry_timers = 0
        self.pauses = PausePoints(pause_nodes)
        self.join = FanOutJoin(graph, log.state, self.reducers)
        # A node whose llm_decide edge a model is choosing counts as running till it answers
        self.provider, self.choices = provider, None  # made at a run's first choice
        self.end = RunEnding(
            run_id=run_id, graph=graph, log=log, outcome=outcome, score_goal=score_goal
        )
        self.steps = StepNow(  # the run's node actors too
            graph=graph,
            log=log,
            factory=node_factory,
            pauses=self.pauses,
            join=self.join,
            end=self.end,
            running=self.running,
        )

    # ------------------------------------------------------------------ messages

    def receive_now(self, message: Any) -> bool:
        # A node's NodeDone while this actor is idle: a common step is taken in the node's
        # task (engine/_step_now.py), with no wake-up of this one; a new run's start, in
        # the task launching it (engine/_start_now.py).
        kind = type(message)
        if kind is NodeDone:
            return self.sync and self.steps.take(self, message)
        return (
            kind is StartRun
            and self.sync
            and not self.resuming
            and start_now(self, self.steps, self.input)
        )

    async def receive(self, message: Any) -> Any:
        end = self.end
        if end.stopping and not (
            end.scoring is not None and isinstance(message, GoalScored | CancelRun)
        ):
            # Late messages after the run stopped, or while its goal is scored: ignored.
            return None
        try:
            if isinstance(message, NodeDone):  # the step message: one coroutine fewer
                await self._on_node_done(message)
            else:
                await self._dispatch(message)
            if self.pauses.held and not end.stopping:
                # A node held at a pause point pauses the run once nothing else runs.
                await self._maybe_pause()
        except Exception as exc:
            if not await end.fail_run(self, exc):
                self.outcome.fail(exc)
                raise
        if end.stopping:
            if end.scoring is None:
                self.stop_self()  # first: its node actors' ends need not be told it
            self._stop_nodes()
        return None

    async def _dispatch(self, message: Any) -> None:
        match message:
            case RetryNode():
                self.retry_timers -= 1
                await self._start_node(message.node_id, message.branch, attempt=message.attempt)
            case StartRun():
                await self._on_start()
            case PauseRun():  # recorded, then obeyed at the next node boundary
                if self.pauses.request(self.log):
                    await self.commit()
            case EdgeDecided():
                await self._on_edge_decided(message)
            case GoalScored():
                await self.end.on_goal_scored(message)
            case CancelRun():
                await self._cancel(message.reason)
            case Terminated():  # a node actor died outside its own error handling
                crashed = self.steps.crashed(message, self.running)
                if crashed is not None:
                    await self._on_node_done(crashed)
            case CommitFailed():
                raise message.error
            case StartStaged() | EndStaged():  # a step or end taken in a node's task
                await self.steps.staged(self, message)  # could not hand its batch over
            case NodeHeld():  # a pause from another process held its start (_foreign.py)
                self.pauses.held_elsewhere(message.node_id, message.branch, self.running)
            case InjectInput():  # the oldest input given (engine/_intake.py)
                if record_next(self.log):
                    await self.commit()
            case _:
                raise TypeError(f"executor got an unknown message {type(message).__name__}")

    # ------------------------------------------------------------------ log

    def emit(self, body: EventBody) -> None:
        """Record ``body``: staged for this step's commit and applied to the state now."""
        self.log.stage(body)

    async def commit(self) -> None:
        """Commit the staged events as one batch at a node boundary: with durability
        "sync" it waits for the store; with "async" it is written behind (left queued in
        the run log, committed with the next durable append). The stretch's end always
        waits (RunEnding.record)."""
        if not self.log.pending:
            return
        # Unshielded, as in _start_node: only the actor system's exit cancels an executor.
        await self.log.append((), durable=self.sync, shield=False)

    # ------------------------------------------------------------------ start / resume

    async def _on_start(self) -> None:
        if not self.resuming:
            self.emit(run_started(self.graph, self.input))
            await self._start_node(self.graph.entry_node, None)
            return
        # Nodes that started and did not finish run again, as the same visit, at the attempt
        # the log gives: the interrupted one, or the next one of a node waiting to retry (a
        # resume never restarts a retry policy's count; the retry runs at once).
        starts, unfinished = resume_walk(self.log, self.pauses, self.join, self.resume_input)
        attempts = self.state.running
        for node, branch in starts:
            rerun = node in unfinished
            attempt = attempts.get(node, 1) if rerun else 1
            await self._start_node(node, branch, attempt=attempt, rerun=rerun)
        if self.join.fan is not None:
            await self._follow(self.join.maybe_join(self.log))
        elif not starts:
            await self.end.finish(self, "completed", None)

    # ------------------------------------------------------------------ nodes

    async def _start_node(
        self, node_id: str, branch: str | None, *, attempt: int = 1, rerun: bool = False
    ) -> None:
        if self.end.stopping:
            return
        if attempt == 1 and not rerun and node_id in self.state.rejected:
            # A rejected gate never opens: its node fails and only its on_failure edges
            # fire (an ``always`` edge would pass the refusal by), else the run ends.
            failed, done, routes = rejection(self.graph, node_id, branch)
            self.emit(failed)
            if routes:
                await self._advance(done, routes)
            else:
                await self.end.record(RunCancelled(node_id=node_id, reason=failed.error))
            return
        if attempt == 1 and not rerun and self.state.steps >= self.graph.max_steps:
            # Before any pause: a gate the run can never pass asks nobody for approval.
            error = out_of_steps(self.graph, node_id, self.state.failed_nodes)
            await self.end.finish(self, "failed", error)
            return
        if self.pauses.hold(self.state, node_id, branch, attempt):
            await self._maybe_pause()
            return
        if node_id in self.running and branch is not None and self.join.fan is not None:
            other = self.running[node_id][1]
            error = f"node {node_id!r} is already running in branch {other!r}"
            await self._follow(self.join.branch_failed(self.log, branch, error))
            return
        started, ref, message = self.steps.starting(self, node_id, branch, attempt, rerun)
        # The node starts once this step's events are committed; durably, the store's answer
        # tells the node (StartOnCommit), not waking the executor on every step's path.
        if self.sync and self.log.submit((started,), StartOnCommit(self, ref, message)):
            return
        # Unshielded: only the actor system's exit cancels an executor (RunLog.append). A
        # new run's first step is durable: Runtime.start returns once it is in the store.
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
            self.pauses.wait_for_input(done.node_id, done.branch)
            await self._maybe_pause()
            return
        routes: list[Route] | None = []  # none for a terminal node ending the run: not read
        main = done.branch is None or self.join.fan is None
        if done.success and not (main and done.node_id in self.terminal_nodes):
            try:
                routes = resolve_edges(
                    self.graph,
                    done.node_id,
                    success=True,
                    memory=self.state.memory,
                    outputs=done.outputs,
                )
            except ExpressionError as exc:
                # Neither false nor the node's failure (always/on_failure would run what
                # the condition guards): the run fails here.
                await self._edge_failed(done, exc)
                return
        if done.success and routes is None:
            # llm_decide edges: a model chooses, in a task of its own. Nothing of the node's
            # end is recorded until it answers; meanwhile the node counts as running, so a
            # cancel records it as the resume point and a resume asks again.
            self.running[done.node_id] = running
            if self.choices is None:
                self.choices = EdgeChoices(owner=self, graph=self.graph, provider=self.provider)
            self.choices.ask(done)
            return
        await self._node_finished(done, routes)

    async def _edge_failed(self, done: NodeDone, exc: ExpressionError) -> None:
        """Fail the run at ``done``'s node, whose edge expression raised: its outputs are
        written and it completes; no edge fires."""
        error = edge_failure(
            self.graph, done.node_id, exc, memory=self.state.memory, outputs=done.outputs
        )
        if done.branch is not None and self.join.fan is not None:
            await self._follow(self.join.fail_run(done.branch, error))
            return
        self.join.node_outputs(self.log, done)
        self.emit(NodeCompleted(node_id=done.node_id, branch=done.branch))
        await self.end.finish(self, "failed", error)

    async def _on_edge_decided(self, message: EdgeDecided) -> None:
        done = message.done
        assert self.choices is not None  # it asked for this choice
        self.choices.answered(done.node_id)
        running = self.running.get(done.node_id)
        if running is None or running[0] != done.attempt:
            return  # the run was cancelled meanwhile
        if isinstance(message.answer, Exception):
            raise message.answer
        del self.running[done.node_id]
        await self._node_finished(done, [message.answer])

    async def _node_finished(self, done: NodeDone, routes: list[Route] | None) -> None:
        """Record a finished node and follow its edges: ``routes``, resolved (an llm_decide
        choice made) for a success; a failure, one found here too (a memory conflict),
        takes its on_failure and always edges, which no model chooses."""
        if done.success:
            conflict = self.join.node_outputs(self.log, done)
            if conflict is not None:
                done = done.failed(conflict, "MemoryConflictError")
            else:
                self.emit(NodeCompleted(node_id=done.node_id, branch=done.branch))
        if not done.success:
            failed, delay = node_failed(self.graph, self.specs[done.node_id], done)
            self.emit(failed)
            if delay is not None:
                await self.commit()
                self.retry_timers += 1
                retry = RetryNode(
                    node_id=done.node_id, attempt=done.attempt + 1, branch=done.branch
                )
                self.system.tell_later(self.ref, retry, delay)
                return
            routes = failure_routes(self.graph, done.node_id)
        assert routes is not None  # a success comes with its resolved routes
        if (
            len(routes) == 1
            and (done.branch is None or self.join.fan is None)
            and not (done.success and done.node_id in self.terminal_nodes)
        ):
            # The common step, what _advance would do, inline (one coroutine fewer).
            self.log.stage(edge_taken(done.node_id, routes[0]))
            await self._start_node(routes[0].target, None)
            return
        await self._advance(done, routes)

    async def _advance(self, done: NodeDone, routes: list[Route]) -> None:
        """Follow a finished node's edges: along a branch, to the run's end, to one node,
        or into a fan-out of branches."""
        node_id = done.node_id
        if done.branch is not None and self.join.fan is not None:
            await self._follow(self.join.advance(self.log, done, routes))
            return
        if done.success and node_id in self.terminal_nodes:
            await self.end.finish(self, "completed", None)
        elif not routes:
            await self.end.finish(self, *dead_end(self.graph, done))
        else:
            for route in routes:
                self.log.stage(edge_taken(node_id, route))
            # Two edges to one node start it once.
            targets = list(dict.fromkeys(r.target for r in routes))
            if len(targets) == 1:
                await self._start_node(targets[0], None)
                return
            for branch in self.join.fork(self.log, node_id, targets):
                await self._start_node(branch, branch)
            await self._follow(
                self.join.maybe_join(self.log)
            )  # joins at once if every target was the join

    async def _follow(self, outcome: JoinOutcome) -> None:
        """Act on what a step of the fan-out leads to."""
        match outcome:
            case StartNode(node_id=node_id, branch=branch):
                await self._start_node(node_id, branch)
            case EndRun(status=status, error=error):
                await self.end.finish(self, status, error)
            case StopBranches():
                stopped: list[str] = []
                for node_id, (_attempt, branch) in list(self.running.items()):
                    if branch is not None:
                        await self.steps.stop(node_id)
                        del self.running[node_id]
                        stopped.append(branch)
                await self._follow(self.join.cancel(self.log, stopped, outcome))
            case None:
                pass

    # ------------------------------------------------------------------ the run's end

    async def _maybe_pause(self) -> None:
        held = self.pauses.held
        if not held or self.running or self.retry_timers or self.end.stopping:
            return
        node_id, _branch, reason = held[0]
        await self.end.record(RunPaused(reason=reason, node_id=node_id))

    async def _cancel(self, reason: str) -> None:
        finished = self.end.stop_scoring()
        if finished is not None:
            # The graph reached its end before the cancel: that end is what happened, and
            # the cancel only stops the measuring (see runtime/engine/_ending.py).
            await self.end.record(finished)
            return
        # The cancel's resume point: a running node, a node held at a pause point, a retry.
        resume_at = list(self.running) + [n for n, _, _ in self.pauses.held] + self.state.pending
        for node_id, (_attempt, branch) in list(self.running.items()):
            await self.steps.stop(node_id)
            # Partial outputs survive: the node's accumulator goes into memory as events.
            for key, value in list(self.state.outputs.get(node_id, {}).items()):
                self.join.write(self.log, key, value, node_id, branch)
        self.running.clear()
        if self.choices is not None:
            self.choices.stop()
        resume = resume_at[0] if resume_at else None
        await self.end.record(RunCancelled(node_id=resume, reason=reason))

    def _stop_nodes(self) -> None:
        # The run's walk is over: nothing waits for the node actors to be gone.
        if self.choices is not None:
            self.choices.stop()
        self.steps.stop_all()

    def on_stopped(self) -> None:
        # Stopped from outside too (the runtime stops a run whose claim was lost): its
        # nodes and its goal's scoring stop with it.
        self._stop_nodes()
        self.end.stop_scoring()
        if not self.outcome.done:
            self.outcome.fail(RuntimeError(f"executor of run {self.run_id} stopped early"))
