"""The common step of a run, taken without waking its executor.

A node finished, one edge leads on, and the next node starts once the step's events are
committed: that is most steps of most runs. When the executor is idle (parked on an empty
mailbox), the actor system hands it the node's ``NodeDone`` synchronously
(``Actor.receive_now``), and :meth:`StepNow.take` records the step there, in the node's
task, with what the executor's ``receive`` would record: no wake-up of the executor's task
and none of its coroutines per step; the run's common end likewise (engine/_end_now.py).
Anything else (a failure, a fan-out, a pause, a model choosing the edge, a step whose
commit cannot be handed over without waiting) is declined before anything is recorded,
and goes through ``receive``.
"""

from __future__ import annotations

from actors import Actor, ActorRef

from ..events._catalogue import EdgeTaken, NodeCompleted, NodeStarted
from ..events._memory import read_memory
from ..spec._model import GraphSpec, NodeSpec
from ._edges import edge_taken, resolve_edges
from ._end_now import end_now
from ._ending import RunEnding
from ._join import FanOutJoin
from ._messages import CommitFailed, EndStaged, ExecuteNode, NodeDone, StartStaged
from ._node_actors import NodeActors, NodeFactory
from ._pause_points import PausePoints
from ._runlog import RunLog
from ._start_on_commit import StartOnCommit

__all__ = ["StepNow"]

#: A first attempt on the main path in the ``running`` map: one shared tuple, not one a step.
_FIRST: tuple[int, str | None] = (1, None)


class StepNow(NodeActors):
    """The run's node actors (:class:`NodeActors`: one object per run, not two), which it
    starts the run's nodes on (for the executor's every start), and its common steps.

    Shares the executor's collaborators and its ``running`` map (node -> (attempt,
    branch)), never replaced, only changed in place."""

    __slots__ = (
        "end",
        "join",
        "pauses",
        "running",
        "single",
        "specs",
        "terminal_nodes",
    )

    def __init__(
        self,
        *,
        graph: GraphSpec,
        log: RunLog,
        factory: NodeFactory,
        pauses: PausePoints,
        join: FanOutJoin,
        end: RunEnding,
        running: dict[str, tuple[int, str | None]],
    ) -> None:
        super().__init__(graph=graph, log=log, factory=factory)
        self.pauses = pauses
        self.join = join
        self.end = end
        self.running = running
        self.specs: dict[str, NodeSpec] = graph.node_map()
        self.single = graph.single_edges()
        self.terminal_nodes = graph.terminal_set()

    def starting(
        self, executor: Actor, node_id: str, branch: str | None, attempt: int, rerun: bool
    ) -> tuple[NodeStarted, ActorRef, ExecuteNode]:
        """Mark ``node_id`` running: its start event, its actor and the message to tell it
        (once the event is committed). Its visit is a new one unless this is a retry or
        a rerun."""
        state = self.log.state
        visit = state.visit_counts.get(node_id, 0)
        if attempt == 1 and not rerun:
            visit += 1
        started = NodeStarted(node_id=node_id, visit=visit or 1, attempt=attempt, branch=branch)
        spec = self.specs[node_id]
        inputs = read_memory(state, spec.input_keys, shared=branch is not None)
        self.running[node_id] = _FIRST if attempt == 1 and branch is None else (attempt, branch)
        ref = self.actor_for(executor, spec, branch)
        message = ExecuteNode(
            node_id=node_id, attempt=attempt, visit=started.visit, branch=branch, inputs=inputs
        )
        return started, ref, message

    async def staged(self, executor: Actor, message: StartStaged | EndStaged) -> None:
        """Append what a step (or the run's end) taken without waking the executor staged
        and could not hand over without waiting; then start its node (report the result)."""
        if type(message) is EndStaged:
            await self.log.append((), durable=True, shield=False, at_rest=True)
            self.end.report()
            return
        assert isinstance(message, StartStaged)
        await self.log.append((message.started,), shield=False)
        spec = self.specs[message.started.node_id]
        await self.actor_for(executor, spec, None).tell(message.execute)

    def start_on_commit(self, executor: Actor, node_id: str) -> None:
        """Start ``node_id`` (a first attempt on the main path) once the step staged with
        its start is committed: at once in memory, from the store's answer durably, or
        through the executor's ``receive`` (``StartStaged``) when the store's queue is full
        or the claim is lost."""
        started, ref, message = self.starting(executor, node_id, None, 1, False)
        log = self.log
        start = StartOnCommit(executor, ref, message)
        bodies = (started,)
        if log.submit(bodies, start):  # on a store (append_now is for a log without one)
            return
        if log.append_now(bodies):
            start.on_done(None, None)
        else:
            executor.ref.tell_nowait(StartStaged(started=started, execute=message))

    def take(self, executor: Actor, done: NodeDone) -> bool:
        """Take ``done``'s step here if it is a common one (see the module docstring); False,
        having recorded nothing, if it is not. Never raises: a failure after the step began
        goes to the executor as CommitFailed, as a failed commit does."""
        node_id = done.node_id
        running = self.running.get(node_id)
        if (
            not done.success
            or done.branch is not None
            or done.needs_input
            or running is None
            or running[0] != done.attempt
            or self.end.stopping
            or self.pauses.held
            or self.join.fan is not None
        ):
            return False
        log = self.log
        state = log.state
        if (
            log.hooks
            or log.failed is not None
            or log.rebase is not None
            or state.pause_requested
            or state.steps >= self.graph.max_steps
        ):
            return False
        terminal = node_id in self.terminal_nodes
        single = None if terminal else self.single.get(node_id)
        if single is not None:  # what resolve_edges returns for it, without asking it
            index, edge = single
            taken = EdgeTaken(
                source=node_id, target=edge.target, edge_index=index, condition=edge.condition
            )
        else:
            try:
                routes = resolve_edges(
                    self.graph, node_id, success=True, memory=state.memory, outputs=done.outputs
                )
            except Exception:  # an ExpressionError, say: receive fails the run with it
                return False
            if routes is None:
                return False
            if terminal or not routes:  # the run's end (engine/_end_now.py)
                return end_now(
                    executor,
                    done,
                    terminal,
                    graph=self.graph,
                    log=log,
                    end=self.end,
                    join=self.join,
                    running=self.running,
                )
            if len(routes) != 1:
                return False
            taken = edge_taken(node_id, routes[0])
        target = taken.target
        if target in state.rejected or target in self.pauses.pause_nodes:
            return False
        try:
            del self.running[node_id]
            self.join.node_outputs(log, done)  # no conflict outside a fan-out
            log.stage(NodeCompleted(node_id=node_id, branch=None), taken)
            if target in self.pauses.passed:  # a pass through a resumed gate is used
                self.pauses.hold(state, target, None, 1)  # (False: checked above)
            self.start_on_commit(executor, target)
        except Exception as exc:
            executor.ref.tell_nowait(CommitFailed(error=exc))
        return True
