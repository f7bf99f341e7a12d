"""Messages between a run's executor and its node actors, and control messages.

They are ``gc=False`` structs: a message never takes part in a reference cycle (nothing
it holds refers back to it), and untracked instances do not count towards the cyclic
collector's thresholds. Two of them are made per node step, so this keeps collections
(and the promotion of in-flight objects to older generations) down.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actors import Message

from ..events._catalogue import NodeStarted, PaidUsage
from ..providers._base import Usage
from ._edges import Route

__all__ = [
    "CancelRun",
    "CommitFailed",
    "EdgeDecided",
    "EndStaged",
    "ExecuteNode",
    "GoalScored",
    "InjectInput",
    "NodeDone",
    "NodeHeld",
    "PauseRun",
    "RetryNode",
    "StartRun",
    "StartStaged",
]


class StartRun(Message, frozen=True, kw_only=True, gc=False, tag="executor.start"):
    """Begin (or resume) walking the graph."""


class ExecuteNode(Message, frozen=True, kw_only=True, gc=False, tag="executor.execute_node"):
    """Executor -> node: run one attempt of a node with these inputs."""

    node_id: str
    attempt: int
    visit: int
    branch: str | None = None
    inputs: dict[str, Any] = {}

    def succeeded(self, outputs: dict[str, Any]) -> NodeDone:
        """This attempt's answer to the executor: it succeeded with ``outputs``."""
        return NodeDone(
            node_id=self.node_id,
            attempt=self.attempt,
            branch=self.branch,
            success=True,
            outputs=outputs,
        )

    def failed(
        self,
        error: str,
        error_type: str,
        *,
        retryable: bool = True,
        needs_input: bool = False,
        usage: PaidUsage | None = None,
    ) -> NodeDone:
        """This attempt's answer to the executor: it failed (``retryable``: the executor may
        run it again; ``needs_input``: it stopped to wait for user input; ``usage``: what
        it paid for that no other event records)."""
        return NodeDone(
            node_id=self.node_id,
            attempt=self.attempt,
            branch=self.branch,
            success=False,
            error=error,
            error_type=error_type,
            retryable=retryable,
            needs_input=needs_input,
            usage=usage,
        )


class NodeDone(Message, frozen=True, kw_only=True, gc=False, tag="executor.node_done"):
    """Node -> executor: one attempt finished.

    ``retryable`` is False for failures the executor must not retry (LLM nodes, whose
    retries belong to their judge, and escalations). ``needs_input`` (with success False)
    means the node stopped to wait for user input: the run pauses with reason "input" and a
    resume runs the node again, which continues from its recorded conversation.
    ``usage``: the tokens of model calls a failed attempt paid for that no event of its
    own records (``node.failed`` records them).
    """

    node_id: str
    attempt: int
    branch: str | None = None
    success: bool
    outputs: dict[str, Any] = {}
    error: str | None = None
    error_type: str | None = None
    retryable: bool = True
    needs_input: bool = False
    usage: PaidUsage | None = None

    def failed(self, error: str, error_type: str) -> NodeDone:
        """This attempt failed for good, as the executor found (no outputs, no retry)."""
        return msgspec.structs.replace(
            self,
            success=False,
            outputs={},
            error=error,
            error_type=error_type,
            retryable=False,
            needs_input=False,
        )


class RetryNode(Message, frozen=True, kw_only=True, gc=False, tag="executor.retry_node"):
    """A backoff timer fired: run the next attempt of a failed plain node."""

    node_id: str
    attempt: int
    branch: str | None = None


class PauseRun(Message, frozen=True, kw_only=True, gc=False, tag="executor.pause"):
    """Pause at the next node boundary."""


class CancelRun(Message, frozen=True, kw_only=True, gc=False, tag="executor.cancel"):
    """Stop now; flush partial outputs; record the resume point."""

    reason: str = ""


class InjectInput(Message, frozen=True, kw_only=True, gc=False, tag="executor.inject_input"):
    """Record the oldest input given to the run and waiting in its log's intake (an
    ``input.injected``): see engine/_intake.py."""


class StartStaged(Message, frozen=True, kw_only=True, gc=False, tag="executor.start_staged"):
    """Executor -> itself: a step taken without waking it (engine/_step_now.py) staged its
    events but could not hand them over without waiting: append them with ``started``,
    then tell the node ``execute``."""

    started: NodeStarted
    execute: ExecuteNode


class EndStaged(Message, frozen=True, kw_only=True, gc=False, tag="executor.end_staged"):
    """Executor -> itself: a run's end recorded without waking it (engine/_end_now.py)
    staged its events but could not hand them over without waiting: append them (at rest)
    and report the result."""


class CommitFailed(Message, frozen=True, kw_only=True, tag="executor.commit_failed"):
    """Store -> executor: a batch the executor handed over without waiting failed.

    The executor fails the run with ``error``, as if its append had raised.
    """

    error: BaseException


class NodeHeld(Message, frozen=True, kw_only=True, gc=False, tag="executor.node_held"):
    """Store -> executor: the start of ``node_id`` (its first attempt) met a pause asked
    for by another process (engine/_foreign.py): it was not recorded, the node does not
    run; the executor holds it there, so the run pauses before it."""

    node_id: str
    branch: str | None = None


class EdgeDecided(Message, frozen=True, kw_only=True, tag="executor.edge_decided"):
    """A model chose the llm_decide edge out of a finished node (``answer``, a route), or
    asking it raised (``answer``, the exception). The executor asks in a task of its own
    and goes on from here, so a cancel or pause that arrives meanwhile is handled at once.
    Tracked by the cyclic GC
    (unlike the step messages): an error's traceback can lead back to the message."""

    done: NodeDone
    answer: Route | Exception


class GoalScored(Message, frozen=True, kw_only=True, tag="executor.goal_scored"):
    """The run's goal was scored (``outcome``, the mapping RunFinished records), or the
    scorer raised ``error``. The executor scores in a task of its own and records the
    run's end from here, so a cancel that arrives meanwhile is handled at once."""

    outcome: dict[str, Any] | None = None
    error: Exception | None = None
    #: The tokens of the goal evaluator's calls (RunFinished's ``goal_*`` counts).
    usage: Usage | None = None
