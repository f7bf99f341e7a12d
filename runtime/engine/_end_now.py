"""The common end of a run, recorded without waking its executor.

A run's last node finished (a terminal node, or one with no edge on) and the run completes
with nothing else to do, on a store: no goal to score (a model may score it: that stays in the
executor's ``receive``), no fan-out, no pause, no commit hook. When the executor is idle,
:func:`end_now` records that end in the node's task, as :meth:`StepNow.take
<runtime.engine._step_now.StepNow.take>` records a common step: ``node.completed`` and
``run.finished``, with the snapshot at rest when due, in one durable batch, as
``RunEnding.record`` appends it. The store's answer (:class:`EndOnCommit`) reports the
result, once the end is committed, and stops the executor, which stops the run's nodes.
Anything else is declined before anything is recorded, and goes through ``receive``.
"""

from __future__ import annotations

from typing import Any

from actors import Actor, ActorStoppedError, MailboxFullError

from ..events._catalogue import NodeCompleted
from ..spec._model import GraphSpec
from ._ending import RunEnding
from ._intake import close
from ._join import FanOutJoin
from ._messages import CommitFailed, EndStaged, NodeDone
from ._runlog import RunLog, Submission

__all__ = ["EndOnCommit", "end_now"]


class EndOnCommit(Submission):
    """The store's answer to a run's end batch (on the loop, outside any task): the result
    is reported once the end is committed, and the executor stops. A failed commit goes to
    the executor as ``CommitFailed``, whose ``receive`` fails the run with it in its own task
    (a claimed run's conflict is settled by starting a task, which a loop callback cannot),
    as the executor's own append raising it would."""

    __slots__ = ("end", "executor")

    #: The batch records the run's end: a snapshot at rest goes with it when due.
    at_rest = True

    def __init__(self, executor: Actor, end: RunEnding) -> None:
        self.executor = executor
        self.end = end

    def on_done(self, result: Any, error: BaseException | None) -> None:
        if error is not None:
            self.end.stopping = False
            try:
                self.executor.ref.tell_nowait(CommitFailed(error=error))
            except ActorStoppedError:
                pass
            except MailboxFullError:
                self.executor.system.tell_later(self.executor.ref, CommitFailed(error=error), 0)
            return
        self.end.report()
        self.executor.ref.stop_nowait()  # idle: stopped here, its nodes with it (on_stopped)


def end_now(
    executor: Actor,
    done: NodeDone,
    terminal: bool,
    *,
    graph: GraphSpec,
    log: RunLog,
    end: RunEnding,
    join: FanOutJoin,
    running: dict[str, tuple[int, str | None]],
) -> bool:
    """Record the run's end at ``done``'s node (which succeeded, the checks of a common
    step made: StepNow.take) here; False, having recorded nothing, where the executor's
    ``receive`` is to. Never raises: a failure after the end began goes to the executor
    as CommitFailed."""
    if (
        log.store is None  # in memory: receive records it (measured: fewer gen-0 collections)
        or (end.score_goal is not None and graph.goal is not None)
        or (not terminal and graph.terminal_nodes)  # a dead end: the run fails (dead_end)
    ):
        return False
    try:
        del running[done.node_id]
        join.node_outputs(log, done)  # no conflict outside a fan-out
        log.stage(NodeCompleted(node_id=done.node_id, branch=None))
        close(log, "ended")  # the input given so far first; none after
        log.stage(end.finished("completed", None))
        if not running:  # nothing of the run runs on: its claim may go with its end
            end.outcome.ending(log.last_seq)
        if log.submit((), EndOnCommit(executor, end)):
            end.stopping = True  # late messages are ignored, as while receive records it
        else:
            # The store's queue is full (or the claim is lost): receive appends it.
            executor.ref.tell_nowait(EndStaged())
    except Exception as exc:
        executor.ref.tell_nowait(CommitFailed(error=exc))
    return True
