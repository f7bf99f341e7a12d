"""The state of a run as its events made it: its fields and their meaning.

:func:`runtime.events._state.apply` is what fills it, one event at a time."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ._catalogue import Quality
from ._conversation import Conversation
from ._fanout import OpenFanOut
from ._node_visit import NodeVisit
from ._run_facts import ForkOrigin, PauseInfo
from ._verdicts import JudgeFailure, StallEntry, VerdictEntry, VerdictRecord

__all__ = ["RunState", "StateStatus"]


#: A run's status in its state: "new" before its first event, then as its events say.
StateStatus = Literal["new", "running", "paused", "cancelled", "completed", "failed"]


class RunState(msgspec.Struct, kw_only=True, dict=True):
    """The state of a run as its events made it. Compare with ``==`` (fields only).

    ``pending`` lists the nodes due to run next (the resume points; the join of an open
    fan-out is due once the branches joined); ``running`` maps a started, unfinished node
    to its attempt: the one running, or, for a node waiting to retry after a failed
    attempt, the next one (a resume runs that attempt, never the first again); ``path`` lists
    nodes in the order they finished (completed, or failed for good); ``steps`` counts node
    visits (a retry or a rerun after a crash is the same visit); ``outputs`` holds each
    running node's output accumulator for its visit (its OutputSet values: empty when a
    new visit starts or a failed attempt is to be retried, kept across a rerun of the
    same visit, gone when the node finishes); ``iterations`` is the iteration of each
    node's last LLM turn in its current visit; ``visits`` holds each started node's
    current visit (:class:`NodeVisit`: what an LLM node, a parallel round and an
    ``llm_judge`` verifier resume from). ``last_seq`` /
    ``last_hash`` / ``last_position`` describe the last folded event (a live state sets
    ``last_seq`` only).
    """

    run_id: str = ""
    status: StateStatus = "new"
    graph: dict[str, Any] | None = None
    graph_hash: str | None = None
    entry: str | None = None
    goal: dict[str, Any] | None = None
    input: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    path: list[str] = []
    visit_counts: dict[str, int] = {}
    steps: int = 0
    pending: list[str] = []
    running: dict[str, int] = {}
    failed_nodes: list[str] = []
    #: Checks that did not run (judge failures, see _verdicts), counted by kind ...
    judge_failures: dict[str, int] = {}
    #: ... and the newest of them (at most KEPT_FAILURES) with their reasons.
    judge_failure_reasons: list[JudgeFailure] = []
    total_retries: int = 0
    #: The open fan-out (forked, not yet joined), if any: its branches and their writes.
    fanout: OpenFanOut | None = None
    outputs: dict[str, dict[str, Any]] = {}
    #: LLM turns of each node over the whole run (``iterations`` counts the current visit).
    turns: dict[str, int] = {}
    #: Judged verdicts of each node over the run, by action (accept, retry, escalate), and
    #: its tool turns (verdicts of level bail_out: the turn called tools, nobody judged it).
    verdict_counts: dict[str, dict[str, int]] = {}
    tool_turns: dict[str, int] = {}
    #: The run's conversation: a sequence of ConversationEntry built by the projection the
    #: LLM node uses too (parallel branches' entries grouped per branch).
    conversation: Conversation = msgspec.field(default_factory=Conversation)
    iterations: dict[str, int] = {}
    visits: dict[str, NodeVisit] = {}
    verdicts: dict[str, VerdictRecord] = {}
    #: Each node's newest judge verdicts, oldest first: at most KEPT_PER_NODE of them, so a
    #: long run's state (and its snapshots) stays bounded; ``verdict_counts`` and
    #: ``tool_turns`` count all.
    verdict_history: dict[str, list[VerdictEntry]] = {}
    #: Each node's newest stall warnings, oldest first (at most KEPT_PER_NODE).
    stalls: dict[str, list[StallEntry]] = {}
    #: Times each edge was taken, keyed ``"source>target"``, in the order first taken.
    edges_taken: dict[str, int] = {}
    #: The run's events by tag, every type counted (an application's own too).
    event_counts: dict[str, int] = {}
    paused: PauseInfo | None = None
    #: The pause node whose approval the run waits for, kept through a cancel. Gates
    #: ``approval.granted`` opened (until their node starts) and ``approval.rejected`` shut.
    gate: str | None = None
    approved: list[str] = []
    rejected: list[str] = []
    #: A fork's copy ended in the middle of the run: its due nodes that had not started
    #: meet their pause gates when it resumes (a fork never skips an approval). Set by
    #: run.forked, cleared by the resume that follows.
    gates_due: bool = False
    #: A pause asked for (``run.pause_requested``, from any process) that the run's owner
    #: obeys at its next node boundary; cleared when the run pauses, is cancelled or
    #: finishes, and in a fork's copy (a resume keeps it: the resuming owner obeys it).
    pause_requested: bool = False
    #: Where a fork's log was copied from (its ``run.forked`` event); None for other runs.
    forked_from: ForkOrigin | None = None
    #: Why workers that claimed the run could not execute it (``run.unrunnable``): each
    #: distinct reason once, oldest first. Shown only; nothing else depends on it.
    unrunnable: list[str] = []
    cancelled_at: str | None = None
    quality: Quality | None = None
    error: str | None = None
    goal_outcome: dict[str, Any] | None = None
    last_seq: int = 0
    last_hash: str = ""
    last_position: int = 0
