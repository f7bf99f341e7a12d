"""Starting a node when the store commits its start, without waking the executor."""

from __future__ import annotations

from typing import Any

from actors import Actor, ActorRef, ActorStoppedError, MailboxFullError, Message, Waiter

from ._foreign import StartHeld
from ._messages import CommitFailed, ExecuteNode, NodeHeld
from ._runlog import Submission

__all__ = ["FirstCommit", "StartOnCommit"]


class StartOnCommit(Submission):
    """The store's answer to a node start's batch (on the loop, outside any task): the
    node runs once its start is committed; a failed commit goes to the executor. One
    object per step, the run log's bookkeeping of the batch included (Submission).
    """

    __slots__ = ("executor", "message", "ref")

    #: A pause from another process may hold the start it answers (_foreign.py).
    holds_starts = True

    def __init__(self, executor: Actor, ref: ActorRef, message: ExecuteNode) -> None:
        self.executor = executor
        self.ref = ref
        self.message = message

    def on_done(self, result: Any, error: BaseException | None) -> None:
        note: Message
        if error is None:
            target, note = self.ref, self.message
        elif type(error) is StartHeld:  # a pause from elsewhere held it: the executor holds it
            target, note = self.executor.ref, self.held()
        else:
            target, note = self.executor.ref, CommitFailed(error=error)
        try:
            target.tell_nowait(note)
        except ActorStoppedError:
            pass  # the run (or the node's lane) stopped meanwhile: nothing is to run
        except MailboxFullError:  # a full executor mailbox: deliver it from a task
            self.executor.system.tell_later(target, note, 0)

    def held(self) -> NodeHeld:
        return NodeHeld(node_id=self.message.node_id, branch=self.message.branch)


class FirstCommit:
    """A run log's commit observer that wakes ``waiter`` at the run's first commit (what
    ``Runtime.start`` waits for); later commits find it done. One slotted object per run,
    not a closure with its cells."""

    __slots__ = ("waiter",)

    def __init__(self, waiter: Waiter) -> None:
        self.waiter = waiter

    def __call__(self, _run_id: str, _bodies: object, _elapsed: float | None) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)
